package admintest

import (
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testSupport reports whether pkg, a module package, is one that only tests
// may import: by the module's convention its name begins or ends with
// "test" (admintest, raftnodetest, leaktest, dialtest, testwait).
func testSupport(pkg string) bool {
	name := path.Base(pkg)
	return strings.HasPrefix(name, "test") || strings.HasSuffix(name, "test")
}

// goList runs the go command in the module's root and returns its output's
// lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestNoProductPackageImportsATestSupportPackage walks what every package
// of the module builds with outside its tests, the router's binary among
// them, and refuses a test-support package there: they fail tests through
// testing.TB, listen on loopback ports and skip the checks the product
// makes, none of which belongs in the binary.
func TestNoProductPackageImportsATestSupportPackage(t *testing.T) {
	module := goList(t, "-m")[0]
	roots := goList(t, "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...")
	checked := 0
	for _, line := range roots {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		if testSupport(pkg) {
			continue
		}
		checked++
		for _, dep := range deps {
			if strings.HasPrefix(dep, module+"/") && testSupport(dep) {
				t.Errorf("%s depends on the test-support package %s outside its tests", pkg, dep)
			}
		}
	}
	if !slices.ContainsFunc(roots, func(l string) bool { return strings.HasPrefix(l, module+"/cmd/router ") }) || checked < 10 {
		t.Fatalf("checked %d packages, and the router's binary among them? the listing was %d lines", checked, len(roots))
	}
}
