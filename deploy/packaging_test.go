package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeVars reads the Makefile's simple assignments (NAME ?= value,
// NAME := value, NAME = value).
func makeVars(mk string) map[string]string {
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)\s*[?:]?=\s*(.*)$`).FindAllStringSubmatch(mk, -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	return vars
}

// expand replaces $(NAME) by its value, except VERSION, which stays
// $(VERSION): the build's name from git describe.
func expand(s string, vars map[string]string) string {
	for range 5 {
		s = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(s, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if v, ok := vars[name]; ok && name != "VERSION" {
				return v
			}
			return ref
		})
	}
	return s
}

// TestImageTagsAgree: the tags `make image` gives the build are the ones
// the Dockerfile's and the docs' commands run. make image tagged
// explorer-edge:$(git describe) only, while the Dockerfile and
// deploy/README.md ran explorer-edge:latest (and the Dockerfile built
// explorer-edge:dev): a reader's `docker run` found no such image.
func TestImageTagsAgree(t *testing.T) {
	raw, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(raw)
	vars := makeVars(mk)
	_, recipe, ok := strings.Cut(mk, "\nimage:")
	if !ok {
		t.Fatal("Makefile: no image target")
	}
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	made := map[string]bool{}
	for _, m := range regexp.MustCompile(`-t (\S+)`).FindAllStringSubmatch(recipe, -1) {
		ref := expand(m[1], vars)
		name, tag, ok := strings.Cut(ref, ":")
		if !ok || name != "explorer-edge" {
			t.Errorf("make image tags %q (from %s), want explorer-edge:<tag>", ref, m[1])
			continue
		}
		made[tag] = true
	}
	if !made["$(VERSION)"] {
		t.Errorf("make image does not tag the version (git describe): %v", made)
	}
	// A document names the version as $(git describe ...) or <git describe>.
	version := func(tag string) bool { return tag == "$(git" || tag == "<git" }
	var tags []string
	for tag := range made {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	ref := regexp.MustCompile("(?:^|[\\s`'\"=])explorer-edge:([^\\s`'\")]+)")
	for _, file := range []string{"../Dockerfile", "README.md", "../README.md", "../docs/configuration.md", "../docs/operations.md"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range ref.FindAllStringSubmatch(line, -1) {
				tag := m[1]
				if made[tag] || version(tag) && made["$(VERSION)"] {
					continue
				}
				t.Errorf("%s:%d names explorer-edge:%s; make image tags %v", file, i+1, tag, tags)
			}
		}
	}
}

// TestNoReplicasUnderHPA: a Deployment an HPA scales sets no replicas.
// deployment.yaml said 3: every `kubectl apply -k` set a fleet the HPA had
// grown back to 3 pods (their caches lost) until the HPA scaled it up again.
func TestNoReplicasUnderHPA(t *testing.T) {
	scaled := map[string]bool{}
	for _, h := range objects(t, "hpa.yaml") {
		if str(h, "kind") == "HorizontalPodAutoscaler" && str(h, "spec", "scaleTargetRef", "kind") == "Deployment" {
			scaled[str(h, "spec", "scaleTargetRef", "name")] = true
		}
	}
	if len(scaled) == 0 {
		t.Fatal("hpa.yaml scales no Deployment")
	}
	for _, d := range objects(t, "deployment.yaml") {
		name := str(d, "metadata", "name")
		if str(d, "kind") != "Deployment" || !scaled[name] {
			continue
		}
		delete(scaled, name)
		if r := dig(d, "spec", "replicas"); r != nil {
			t.Errorf("Deployment %s sets replicas: %v under an HPA: each kubectl apply resets the HPA's count", name, r)
		}
	}
	for name := range scaled {
		t.Errorf("the HPA scales Deployment %s, which deployment.yaml does not hold", name)
	}
}
