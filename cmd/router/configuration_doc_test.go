package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/configuration.md from the flags")

const configurationDoc = "../../docs/configuration.md"

// TestTheConfigurationReferenceIsTheFlags keeps docs/configuration.md what
// the flags say: every flag of `router serve`, under its category, with its
// aliases, its variable, its default and its usage, and no other. `make
// docs` rewrites it.
func TestTheConfigurationReferenceIsTheFlags(t *testing.T) {
	want := renderConfiguration(t)
	if *updateDocs {
		if err := os.WriteFile(configurationDoc, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the flags say: run `make docs` and commit it", configurationDoc)
	}
}

// Every flag is in one category, once, and every category's flag exists.
func TestEveryFlagIsInOneCategory(t *testing.T) {
	byName := serveFlagsByName()
	seen := map[string]string{}
	for _, c := range flagCategories {
		for _, name := range c.flags {
			if byName[name] == nil {
				t.Errorf("category %q names --%s, which `router serve` does not have", c.name, name)
			}
			if other, twice := seen[name]; twice {
				t.Errorf("--%s is in %q and %q", name, other, c.name)
			}
			seen[name] = c.name
		}
	}
	for _, f := range serveFlags() {
		if f.(cli.CategorizableFlag).GetCategory() == "" {
			t.Errorf("--%s has no category", f.Names()[0])
		}
	}
}

func renderConfiguration(t *testing.T) []byte {
	t.Helper()
	vr := map[string]bool{}
	for _, f := range readVLLMRouterFlags(t) {
		vr[f.name] = true
	}
	byName := serveFlagsByName()
	var b strings.Builder
	b.WriteString(configurationHeader)
	for _, c := range flagCategories {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n| flag | default | | meaning |\n|---|---|---|---|\n", c.name, c.about)
		for _, name := range c.flags {
			f := byName[name]
			mark := ""
			if vr[name] {
				mark = "vr"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", flagCell(f), cell(referenceDefault(f)), mark, cell(usageOf(f)))
		}
	}
	fmt.Fprintf(&b, "\n## %s\n\n%s\n\n| flag | vllm-router's default | what happens instead |\n|---|---|---|\n",
		compatCategory.name, compatCategory.about)
	for _, f := range compatibleFlags {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", flagCell(f.flag), cell(referenceDefault(f.flag)), cell(f.notice))
	}
	return []byte(b.String())
}

const configurationHeader = `# Configuration of ` + "`router serve`" + `

<!-- Generated from the flags by ` + "`make docs`" + `; TestTheConfigurationReferenceIsTheFlags keeps it true. -->

Every flag also reads ` + "`ROUTER_<NAME>`" + ` (` + "`--cache-threshold`" + ` from ` + "`ROUTER_CACHE_THRESHOLD`" + `). A bad
value is refused at start with a message that names the flag. ` + "`router serve --help`" + ` lists the
same flags in the same groups.

Flags marked **vr** are vllm-router's, with its meaning and its default, so that a command line
written for vllm-router starts this router unchanged; vllm-router's flags with no counterpart here
are accepted too (the last group). The others are ours.

Units: a flag whose name ends in ` + "`-secs` or `-ms`" + ` takes whole seconds or milliseconds, and so does
vllm-router's ` + "`--eviction-interval`" + `; every other duration flag takes a Go duration such as ` + "`90s`" + `,
` + "`1500ms` or `2m`" + `. Sizes are bytes.
`

// flagCell is a flag's names as the reference writes them.
func flagCell(f cli.Flag) string {
	var names []string
	for _, n := range f.Names() {
		if len(n) == 1 {
			names = append(names, "`-"+n+"`")
		} else {
			names = append(names, "`--"+n+"`")
		}
	}
	return strings.Join(names, ", ")
}

// referenceDefault is a flag's default as the reference writes it.
func referenceDefault(f cli.Flag) string {
	switch f := f.(type) {
	case *cli.DurationFlag:
		return f.Value.String()
	case *cli.Float64Flag:
		if f.Value == notGiven {
			return "the global value"
		}
	case *cli.BoolFlag:
		if !f.Value {
			return "off"
		}
		return "on"
	}
	if d := defaultOf(f); d != "-" {
		return d
	}
	return ""
}

func usageOf(f cli.Flag) string {
	// The header says what a duration takes, once.
	return strings.TrimSuffix(f.(cli.DocGenerationFlag).GetUsage(), durationUnits)
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
