package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const root = "../.."

// documents are the markdown files a reader follows links between.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, name := range []string{"README.md", "SECURITY.md", "BENCHMARKS.md", "CHANGELOG.md"} {
		out = append(out, filepath.Join(root, name))
	}
	return append(out, docs...)
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestEveryRelativeLinkLeadsSomewhere: a link to a file names one that
// exists, and a link to a heading names one the file has.
func TestEveryRelativeLinkLeadsSomewhere(t *testing.T) {
	for _, doc := range documents(t) {
		text := readDoc(t, doc)
		for _, m := range link.FindAllStringSubmatch(stripCode(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel(doc), target)
					continue
				}
			}
			if anchor != "" && !anchors(readDoc(t, file))[anchor] {
				t.Errorf("%s links to %s, but %s has no heading #%s", rel(doc), target, rel(file), anchor)
			}
		}
	}
}

// TestTheREADMEListsEveryPageOfDocs: the front door leads to every page.
func TestTheREADMEListsEveryPageOfDocs(t *testing.T) {
	readme := readDoc(t, filepath.Join(root, "README.md"))
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if len(docs) < 5 {
		t.Fatalf("only %d pages in docs/", len(docs))
	}
	for _, d := range docs {
		if !strings.Contains(readme, "](docs/"+filepath.Base(d)+")") {
			t.Errorf("README.md does not link to docs/%s", filepath.Base(d))
		}
	}
}

// TestAnchorsAreGitHubs pins the slug rule on headings this project has.
func TestAnchorsAreGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"LoRA adapters (`--lora-residency`)": "lora-adapters---lora-residency",
		"The status page: `/ui`":             "the-status-page-ui",
		"Prefill/decode disaggregation":      "prefilldecode-disaggregation",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

// stripCode drops fenced code blocks, whose brackets are not links.
func stripCode(text string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// anchors are the ids GitHub gives the headings of text.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		s := slug(strings.TrimLeft(line, "#"))
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's id of a heading: lower case, letters, digits, spaces
// as hyphens, hyphens and underscores kept, the rest dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }
