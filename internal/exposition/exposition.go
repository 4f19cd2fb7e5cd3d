package exposition

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

var (
	mu    sync.RWMutex
	texts = map[string]string{}
)

// Describe records the one-line help text of each family (name without
// labels or histogram suffixes -> text). Packages call it once, from a
// package-level variable, for the families they register. Describing a
// family twice with different texts panics: two packages would then
// disagree on what one name means.
func Describe(help map[string]string) struct{} {
	mu.Lock()
	defer mu.Unlock()
	for family, text := range help {
		if old, ok := texts[family]; ok && old != text {
			panic(fmt.Sprintf("exposition: %s described twice: %q and %q", family, old, text))
		}
		texts[family] = text
	}
	return struct{}{}
}

// Help returns the help text of family, if one was described.
func Help(family string) (string, bool) {
	mu.RLock()
	defer mu.RUnlock()
	text, ok := texts[family]
	return text, ok && text != ""
}

// Described returns every family described so far, in no order: what a
// test holds the reference documentation to.
func Described() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(texts))
	for family := range texts {
		out = append(out, family)
	}
	return out
}

// helpEscaper escapes a help text as the text format wants it.
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

var helpPrefix = []byte("# HELP ")

// Write writes set to w in Prometheus' text format, each empty "# HELP
// family" line completed with the family's described text. Safe for
// concurrent use; a scrape costs one copy of the exposition.
func Write(w io.Writer, set *metrics.Set) {
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	out := bytes.NewBuffer(make([]byte, 0, buf.Len()+buf.Len()/4))
	for rest := buf.Bytes(); len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		out.Write(completeHelp(line))
		out.WriteByte('\n')
	}
	_, _ = w.Write(out.Bytes())
}

// completeHelp returns line with its help text when it is an empty help
// line of a described family, else line unchanged.
func completeHelp(line []byte) []byte {
	family, ok := bytes.CutPrefix(line, helpPrefix)
	if !ok || bytes.IndexByte(family, ' ') >= 0 {
		return line
	}
	text, ok := Help(string(family))
	if !ok {
		return line
	}
	return fmt.Appendf(nil, "# HELP %s %s", family, helpEscaper.Replace(text))
}
