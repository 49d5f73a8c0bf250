// Package docs holds the project's documents; its test keeps them true to
// the tree: every relative Markdown link points to a file (and heading)
// that exists, and no file cites a document that is not in the repository.
package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// trackedFiles lists the repository's files (git ls-files from the root),
// or walks the tree when git is not at hand.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files").Output(); err == nil && len(out) > 0 {
		return strings.Fields(string(out))
	}
	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "out") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	return files
}

var (
	mdLink  = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fence   = regexp.MustCompile("(?s)```.*?```")
	// Documents outside the repository, or issue numbers, that a reader
	// of the repository cannot open.
	citation = regexp.MustCompile(`DESIGN\.md|(^|[^/\w.])spec/|\.\./shared|\b[Ii]ssues? #?\d+|\(issue \d`)
)

// slug is GitHub's anchor of a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := slug(m[1])
		for n := 0; ; n++ { // GitHub numbers repeated headings
			k := s
			if n > 0 {
				k = s + "-" + string(rune('0'+n))
			}
			if !out[k] {
				out[k] = true
				break
			}
		}
	}
	return out
}

func TestLinksAndCitations(t *testing.T) {
	root := ".."
	files := trackedFiles(t, root)
	if len(files) < 50 {
		t.Fatalf("found %d files: not the repository", len(files))
	}
	for _, f := range files {
		ext := filepath.Ext(f)
		if ext != ".md" && ext != ".go" && ext != ".yaml" && ext != ".yml" && filepath.Base(f) != "Makefile" && !strings.HasPrefix(f, "bench/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // listed but not there (a file removed in the work tree)
		}
		text := string(b)
		if f != "docs/docs_test.go" {
			for i, line := range strings.Split(text, "\n") {
				if citation.MatchString(line) {
					t.Errorf("%s:%d cites what is not in the repository: %s", f, i+1, strings.TrimSpace(line))
				}
			}
		}
		if ext != ".md" {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
			}
			tb, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				if st, serr := os.Stat(filepath.Join(root, file)); serr == nil && st.IsDir() {
					continue
				}
				t.Errorf("%s: link to %s: no such file", f, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(string(tb))[anchor] {
				t.Errorf("%s: link to %s: no such heading in %s", f, target, file)
			}
		}
	}
}
