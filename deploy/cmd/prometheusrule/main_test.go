package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile    = "deploy/prometheus/alerts.yaml"
	manifestFile = "deploy/k8s/prometheusrule.yaml"
)

func read(t *testing.T, repoPath string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", repoPath))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckedInManifestIsCurrent: deploy/k8s/prometheusrule.yaml is what
// alerts.yaml makes, so a rule changed in one place cannot be missing from
// the other. On failure: make prometheusrule.
func TestCheckedInManifestIsCurrent(t *testing.T) {
	want, err := Generate(read(t, rulesFile), rulesFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, manifestFile); !bytes.Equal(got, want) {
		t.Fatalf("%s is not what %s makes: run `make prometheusrule` and commit it", manifestFile, rulesFile)
	}
}

// TestManifestHoldsTheSameRules: the manifest's spec.groups decode to the
// rule file's groups, and a runbook base goes in front of relative URLs only.
func TestManifestHoldsTheSameRules(t *testing.T) {
	rules := read(t, rulesFile)
	out, err := Generate(rules, rulesFile, "https://git.example/edge/blob/main/")
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Groups []map[string]any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(out, &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.APIVersion != "monitoring.coreos.com/v1" || manifest.Kind != "PrometheusRule" || manifest.Metadata.Name == "" {
		t.Errorf("header: %s %s %q", manifest.APIVersion, manifest.Kind, manifest.Metadata.Name)
	}
	var file struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(string(rules), `runbook_url: "docs/`, `runbook_url: "https://git.example/edge/blob/main/docs/`)), &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Groups) == 0 || !reflect.DeepEqual(manifest.Spec.Groups, file.Groups) {
		t.Errorf("the manifest's groups differ from the rule file's (with the runbook base)")
	}

	for _, bad := range []string{"", "groups: []\n", "- a\n", "groups: {}\n"} {
		if _, err := Generate([]byte(bad), "x", ""); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
