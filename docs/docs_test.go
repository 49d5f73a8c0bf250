// Package docs holds the project's documents. It has no code: its test
// keeps the documents honest. Every relative Markdown link leads to a file
// of the repository (and, with an anchor, to a heading of that file),
// every Go file a document names by its path exists, and no file points a
// reader at something outside the repository: a design brief, an API
// specification or an issue tracker that a newcomer to the repository
// does not have. What those said lives in docs/design.md.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// TestMarkdownLinksResolve: every relative link of every Markdown file in
// the repository names a file or directory that exists inside it, and an
// anchor names a heading of the Markdown file it points into.
func TestMarkdownLinksResolve(t *testing.T) {
	root, files := repository(t)
	problems := checkLinks(root, files)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d Markdown files checked, %d problems", countSuffix(files, ".md"), len(problems))
}

// TestNoCitationsOutsideTheRepository: no file cites the design brief, the
// API specification or the directory they came in, or an issue by number.
// Each such reference is to point to a file of the repository instead
// (docs/design.md, docs/openapi.yaml, ...).
func TestNoCitationsOutsideTheRepository(t *testing.T) {
	root, files := repository(t)
	problems := checkCitations(root, files)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d files checked, %d citations", len(files), len(problems))
}

// TestCitedGoFilesExist: every Go file a document names by its path
// (`proxy/route/memo.go`, in a code span, a table or prose) exists, so
// that a package split or a renamed file cannot leave a reader looking
// for code that has gone.
func TestCitedGoFilesExist(t *testing.T) {
	root, files := repository(t)
	problems, n := checkGoPaths(root, files)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d paths of Go files cited, %d problems", n, len(problems))
}

// TestCheckersCatchBadDocs keeps the link and citation checks honest on a
// repository made up for the purpose: each planted defect is reported, and
// nothing else.
func TestCheckersCatchBadDocs(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", strings.Join([]string{
		"# Edge",
		"## What it does (`make run`)",
		"## What it does (`make run`)",
		"See [design](docs/design.md#the-request-path), [twice](#what-it-does-make-run-1),",
		"[a dir](docs/), [code](main.go), [web](https://example.com/x.md), [mail](mailto:a@b).",
		"Broken: [gone](docs/gone.md), [no heading](docs/design.md#nowhere), [here](#nope),",
		"[outside](../elsewhere/DESIGN.txt).",
		"```",
		"[in a code block](nothing.md) is not a link",
		"```",
		"`[in code](nothing.md)` neither.",
		"[ref]: docs/missing.md",
		"",
	}, "\n"))
	write("docs/design.md", "# Design\n\n## The request path\n\nBack to the [README](../README.md#edge).\n")
	write("main.go", strings.Join([]string{
		"package main",
		"// the batches are per hash (see docs/design.md, section Batches)",
		"// cached per hash (DESIGN.md section 4)",
		"// a window of 10000 rows (spec/chain-explorer-read-api.md)",
		"// as ../shared/STYLE.md says",
		"// since issue 17, and (issue 18.2)",
		"// a Go bug: go.dev/issue/75804 is no citation of ours, nor https://semver.org/spec/v2.0.0.html",
		"",
	}, "\n"))
	files := []string{"README.md", "docs/design.md", "main.go"}

	gotLinks := checkLinks(root, files)
	wantLinks := []string{
		"README.md:6: link docs/gone.md: no such file",
		"README.md:6: link docs/design.md#nowhere: docs/design.md has no heading #nowhere",
		"README.md:6: link #nope: README.md has no heading #nope",
		"README.md:7: link ../elsewhere/DESIGN.txt: outside the repository",
		"README.md:12: link docs/missing.md: no such file",
	}
	if strings.Join(gotLinks, "\n") != strings.Join(wantLinks, "\n") {
		t.Errorf("checkLinks:\n%s\nwant:\n%s", strings.Join(gotLinks, "\n"), strings.Join(wantLinks, "\n"))
	}
	gotCites := checkCitations(root, files)
	wantCites := []string{
		`main.go:3: cites "DESIGN.md"`,
		`main.go:4: cites "spec/"`,
		`main.go:4: cites "chain-explorer-read-api"`,
		`main.go:5: cites "../shared"`,
		`main.go:6: cites "issue 17"`,
		`main.go:6: cites "issue 18"`,
	}
	if strings.Join(gotCites, "\n") != strings.Join(wantCites, "\n") {
		t.Errorf("checkCitations:\n%s\nwant:\n%s", strings.Join(gotCites, "\n"), strings.Join(wantCites, "\n"))
	}
	for heading, want := range map[string]string{
		"Against nginx's proxy_cache (`make bench-compare`)": "against-nginxs-proxy_cache-make-bench-compare",
		"ExplorerEdgeBreakerOpen":                            "exploreredgebreakeropen",
		"Fleet mode: the shared Redis tier":                  "fleet-mode-the-shared-redis-tier",
		"[Unreleased]":                                       "unreleased",
		"Requests & answers":                                 "requests--answers",
		"**Bold** and a [link](x.md)":                        "bold-and-a-link",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// repository is the repository's root and the files it holds (tracked, or
// new and not ignored), as slash-separated paths relative to the root.
// Without git (an exported tree), it walks the tree instead.
func repository(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: the test must run in docs/", root)
	}
	var files []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
	} else {
		t.Logf("git ls-files: %v; walking the tree", err)
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if rel == ".git" || rel == "bin" || rel == "bench/out" {
					return filepath.SkipDir
				}
				return nil
			}
			files = append(files, rel)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Deleted but not yet committed files are listed by git; skip them.
	kept := files[:0]
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err == nil && st.Mode().IsRegular() {
			kept = append(kept, f)
		}
	}
	sort.Strings(kept)
	if len(kept) < 10 || countSuffix(kept, ".md") == 0 {
		t.Fatalf("%d files, %d Markdown: is this the repository?", len(kept), countSuffix(kept, ".md"))
	}
	return root, kept
}

func countSuffix(files []string, suffix string) int {
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, suffix) {
			n++
		}
	}
	return n
}

var (
	fence     = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan  = regexp.MustCompile("`+[^`]*`+")
	inlineURL = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	heading   = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlID    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	scheme    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// mdLines calls fn for each line of a Markdown file outside fenced code
// blocks, with its inline code spans blanked out.
func mdLines(text []byte, fn func(n int, line string)) {
	in := false
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if !in {
			fn(n, codeSpan.ReplaceAllString(line, "``"))
		}
	}
}

// anchors are the anchors of a Markdown file's headings, as GitHub makes
// them (a repeated heading gets -1, -2, ...), and those of <a name/id>.
func anchors(text []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor of a heading: its text as rendered (links reduced
// to their text), lower case, with every character but letters, digits,
// marks, '_', '-' and spaces dropped, and each space made a '-'.
func slug(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLinks reports each relative link of the Markdown files among files
// (paths relative to root) whose target does not exist, lies outside root,
// or names an anchor its Markdown target has no heading for.
func checkLinks(root string, files []string) []string {
	var problems []string
	cache := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := cache[rel]; ok {
			return a
		}
		text, _ := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		cache[rel] = anchors(text)
		return cache[rel]
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		mdLines(text, func(n int, line string) {
			var targets []string
			for _, m := range inlineURL.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
			if m := refDef.FindStringSubmatch(line); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if p := checkLink(root, f, target, anchorsOf); p != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: link %s: %s", f, n, target, p))
				}
			}
		})
	}
	return problems
}

// checkLink says what is wrong with one link target of file f, or "".
func checkLink(root, f, target string, anchorsOf func(string) map[string]bool) string {
	if target == "" || scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // not a link into the repository
	}
	p, frag, _ := strings.Cut(target, "#")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	rel := f
	if p != "" {
		if strings.HasPrefix(p, "/") {
			rel = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			rel = path.Clean(path.Join(path.Dir(f), p))
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return "no such file"
		}
	}
	if frag == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	if !anchorsOf(rel)[strings.ToLower(frag)] {
		return fmt.Sprintf("%s has no heading #%s", rel, frag)
	}
	return ""
}

// citations are the references to what is not in the repository: the
// design brief and the directory it came in, the API specification, and
// issues by number ("issue 17", "(issue 18.2)", "issues 17 and 18").
// Each pattern's first group is what is reported; a path inside a web
// address (semver.org/spec/...) is no citation.
var citations = []*regexp.Regexp{
	regexp.MustCompile(`(DESIGN\.md)`),
	regexp.MustCompile(`(?:^|[^/\w.-])(spec/)`),
	regexp.MustCompile(`(chain-explorer-read-api)`),
	regexp.MustCompile(`(\.\./shared)\b`),
	regexp.MustCompile(`(?i)\b(issues?\s*#?\d+)`),
}

// checkCitations reports each line of the text files among files that
// matches one of citations. Fuzz corpora (testdata) and this file, which
// must spell the patterns out, are left out.
func checkCitations(root string, files []string) []string {
	var problems []string
	for _, f := range files {
		if strings.Contains("/"+f, "/testdata/") || f == "docs/docs_test.go" || f == "go.sum" {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if bytes.IndexByte(text, 0) >= 0 {
			continue // binary
		}
		for n, line := range strings.Split(string(text), "\n") {
			for _, re := range citations {
				for _, m := range re.FindAllStringSubmatch(line, -1) {
					problems = append(problems, fmt.Sprintf("%s:%d: cites %q", f, n+1, m[1]))
				}
			}
		}
	}
	return problems
}

// history are the Markdown files that record the past: they cite files as
// they were then, and checkGoPaths leaves them alone.
var history = map[string]bool{"CHANGELOG.md": true, "bench/HISTORY.md": true}

// goPath is a run of path characters ending in a Go file's name.
var goPath = regexp.MustCompile(`[\w./-]+\.go\b`)

// checkGoPaths reports each path of a Go file, with at least one slash,
// that a Markdown file among files (history aside) names, anywhere in its
// text, and that does not exist. A path is taken from the repository's
// root, or from the document's own directory when it starts with ./ or
// ../ or its first element is a directory there (bench/README.md may say
// soak/check.go). A path whose first element is no directory of either
// (runtime/netpoll_epoll.go: Go's own source), or that begins with a slash
// (a web address), is not the repository's and is left alone. It also
// returns how many paths it checked.
func checkGoPaths(root string, files []string) (problems []string, checked int) {
	isDir := func(rel string) bool {
		st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil && st.IsDir()
	}
	isFile := func(rel string) bool {
		st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil && st.Mode().IsRegular()
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".md") || history[f] {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		dir := path.Dir(f)
		for n, line := range strings.Split(string(text), "\n") {
			for _, p := range goPath.FindAllString(line, -1) {
				if !strings.Contains(p, "/") || strings.HasPrefix(p, "/") {
					continue
				}
				first, _, _ := strings.Cut(p, "/")
				var candidates []string
				switch {
				case first == "." || first == "..":
					candidates = []string{path.Join(dir, p)}
				case isDir(first):
					candidates = []string{p, path.Join(dir, p)}
				case isDir(path.Join(dir, first)):
					candidates = []string{path.Join(dir, p)}
				default:
					continue // not a path of the repository
				}
				checked++
				found := false
				for _, c := range candidates {
					if c != ".." && !strings.HasPrefix(c, "../") && isFile(c) {
						found = true
						break
					}
				}
				if !found {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: no such file", f, n+1, p))
				}
			}
		}
	}
	return problems, checked
}

// TestGoPathCheckerCatchesBadDocs keeps checkGoPaths honest on a
// repository made up for the purpose: each path of a file that is not
// there is reported, and nothing else.
func TestGoPathCheckerCatchesBadDocs(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proxy/proxy.go", "package proxy\n")
	write("proxy/route/memo.go", "package route\n")
	write("bench/soak/check.go", "package main\n")
	write("README.md", strings.Join([]string{
		"Start at `proxy/proxy.go`: `Handle`, then proxy/route/memo.go (`Memo.Lookup`).",
		"| `proxy/route` | `proxy/route/routes.go`: `Table` |",
		"The pool was `proxy/pool.go`; proxy/upstream.go is gone too.",
		"Not ours: `runtime/netpoll_epoll.go`, https://github.com/valyala/fasthttp/blob/master/server.go,",
		"go.dev/src/net/http/server.go, and a file with no directory, `memo.go`.",
		"```",
		"see proxy/errors.go",
		"```",
		"",
	}, "\n"))
	write("bench/README.md", "The checks are `soak/check.go` and `./soak/moving.go`; `../proxy/proxy.go` and `../proxy/fetch.go`.\n")
	write("CHANGELOG.md", "proxy/pool.go split into proxy/upstream.\n")
	files := []string{"CHANGELOG.md", "README.md", "bench/README.md", "bench/soak/check.go", "proxy/proxy.go", "proxy/route/memo.go"}
	got, checked := checkGoPaths(root, files)
	want := []string{
		"README.md:2: proxy/route/routes.go: no such file",
		"README.md:3: proxy/pool.go: no such file",
		"README.md:3: proxy/upstream.go: no such file",
		"README.md:7: proxy/errors.go: no such file",
		"bench/README.md:1: ./soak/moving.go: no such file",
		"bench/README.md:1: ../proxy/fetch.go: no such file",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checkGoPaths:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if checked != 10 {
		t.Errorf("checkGoPaths checked %d paths, want 10", checked)
	}
}
