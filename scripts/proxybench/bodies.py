"""Writes the chat request bodies of the proxy benchmark: a system prompt and
a user turn, the shape an agent sends, of about the given sizes in KiB.
Usage: bodies.py DIR 4 64  ->  DIR/body-4.json, DIR/body-64.json"""
import json
import sys

out = sys.argv[1]
for kib in sys.argv[2:]:
    size = int(kib) << 10
    filler = ("You are a careful assistant. " * (size // 29 + 1))[: size - 160]
    body = {"model": "m", "stream": False, "max_tokens": 16, "messages": [
        {"role": "system", "content": filler},
        {"role": "user", "content": "Summarise the conversation so far."}]}
    with open("%s/body-%s.json" % (out, kib), "w") as f:
        json.dump(body, f, separators=(",", ":"))
