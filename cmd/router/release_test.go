package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A release as CHANGELOG.md names it.
type release struct{ version, commit string }

// releases lists CHANGELOG.md's releases, newest first.
func releases(t *testing.T) []release {
	t.Helper()
	f, err := os.Open("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heading := regexp.MustCompile(`^## \[(v\d+\.\d+\.\d+[^\]]*)\]`)
	commit := regexp.MustCompile(`^Commit: ([0-9a-f]{7,40})`)
	var out []release
	var version string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := heading.FindStringSubmatch(sc.Text()); m != nil {
			version = m[1]
		} else if m := commit.FindStringSubmatch(sc.Text()); m != nil && version != "" {
			out = append(out, release{version, m[1]})
			version = ""
		}
	}
	return out
}

// previousRelease is the newest release that is not this checkout's HEAD:
// the build a tier upgrades from. It skips the test where git or the
// release's commit is not at hand (a tarball, a shallow clone).
func previousRelease(t *testing.T) release {
	t.Helper()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git history to build the previous release from: %v", err)
	}
	for _, r := range releases(t) {
		full, err := exec.Command("git", "rev-parse", "--verify", "--quiet", r.commit+"^{commit}").Output()
		if err != nil {
			t.Skipf("the previous release's commit %s (%s) is not in this clone (a shallow one?)", r.commit, r.version)
		}
		if strings.TrimSpace(string(full)) != strings.TrimSpace(string(head)) {
			return release{r.version, strings.TrimSpace(string(full))}
		}
	}
	t.Fatal("CHANGELOG.md names no release before this commit")
	return release{}
}

// releaseRouter is the router binary of r, built once per commit into the
// user's cache (KVROUTER_RELEASE_CACHE overrides where) from the commit's
// tree as git archive writes it, so a later run takes seconds.
func releaseRouter(t *testing.T, r release) string {
	t.Helper()
	dir := os.Getenv("KVROUTER_RELEASE_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(base, "kvrouter", "releases")
	}
	bin := filepath.Join(dir, r.commit, "router")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	t.Logf("building %s (%s) into %s once", r.version, r.commit[:7], bin)
	if err := buildRelease(r, bin); err != nil {
		t.Fatalf("building the previous release: %v", err)
	}
	return bin
}

// buildRelease builds r's router into bin: its tree extracted into a
// temporary directory, built there, moved into place whole.
func buildRelease(r release, bin string) error {
	src, err := os.MkdirTemp("", "kvrouter-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	archive := filepath.Join(src, "tree.tar")
	// From the top of the checkout: run in a subdirectory, git archive
	// writes only that subdirectory's tree.
	git := exec.Command("git", "archive", "--format=tar", "-o", archive, r.commit)
	git.Dir = "../.."
	if out, err := git.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %v\n%s", r.commit, err, out)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", src).CombinedOutput(); err != nil {
		return fmt.Errorf("extracting %s: %v\n%s", r.commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-X main.version="+r.version, "-o", tmp, "./cmd/router")
	cmd.Dir, cmd.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go build at %s: %v\n%s", r.commit, err, out)
	}
	return os.Rename(tmp, bin)
}

// TestTheChangelogNamesEveryReleaseByACommitOfThisHistory: every release of
// CHANGELOG.md has a commit, and the commits are this repository's, so a
// clone without tags finds them.
func TestTheChangelogNamesEveryReleaseByACommitOfThisHistory(t *testing.T) {
	rs := releases(t)
	if len(rs) == 0 {
		t.Fatal("CHANGELOG.md names no release")
	}
	shallow, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(shallow)) == "true" {
		t.Skip("no whole git history here")
	}
	for _, r := range rs {
		if len(r.commit) != 40 {
			t.Errorf("%s names commit %q: give it whole, so that it stays unambiguous", r.version, r.commit)
		}
		if err := exec.Command("git", "merge-base", "--is-ancestor", r.commit, "HEAD").Run(); err != nil {
			t.Errorf("%s names commit %s, which is not in this checkout's history: %v", r.version, r.commit, err)
		}
	}
}
