// Package deploy holds no code: its tests read the Kubernetes manifests in
// k8s/ and check what an operator would otherwise find out on a cluster
// (sizing against cache.max_bytes, pinned images, network policies, where
// the Redis password comes from).
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"explorer-edge/cache"
	"explorer-edge/internal/testkit"
)

// object is one Kubernetes object as YAML decodes it.
type object = map[string]any

// dig walks maps by key and lists by index; nil when a step is missing.
func dig(v any, steps ...any) any {
	for _, s := range steps {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[s]
		case int:
			l, ok := v.([]any)
			if !ok || s >= len(l) {
				return nil
			}
			v = l[s]
		}
	}
	return v
}

func str(v any, steps ...any) string {
	s, _ := dig(v, steps...).(string)
	return s
}

func list(v any, steps ...any) []any {
	l, _ := dig(v, steps...).([]any)
	return l
}

// objects reads every document of k8s/<file>.
func objects(t *testing.T, file string) []object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("k8s", file))
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// find returns the object of kind and name in k8s/<file>.
func find(t *testing.T, file, kind, name string) object {
	t.Helper()
	for _, o := range objects(t, file) {
		if str(o, "kind") == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("%s: no %s %q", file, kind, name)
	return nil
}

// container returns the named container of a Deployment.
func container(t *testing.T, d object, name string) map[string]any {
	t.Helper()
	for _, c := range list(d, "spec", "template", "spec", "containers") {
		if str(c, "name") == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("deployment %s has no container %q", str(d, "metadata", "name"), name)
	return nil
}

// quantity parses a Kubernetes memory quantity ("512Mi", "1Gi", "536870912").
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * u.mult
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", q, err)
	}
	return v
}

// fleetConfig is the config.yaml the ConfigMap mounts into every edge.
func fleetConfig(t *testing.T) map[string]any {
	t.Helper()
	cm := find(t, "configmap.yaml", "ConfigMap", "explorer-edge-config")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(str(cm, "data", "config.yaml")), &cfg); err != nil {
		t.Fatalf("configmap.yaml config.yaml: %v", err)
	}
	return cfg
}

// Headroom above the heap limit the edge sets itself: the binary's mapped
// pages, kernel socket buffers (charged to the pod's cgroup) and the GC's
// overshoot of a soft limit.
const podHeadroom = 64 << 20

// TestPodMemoryFollowsCacheSize: the pod's memory request and limit are
// derived from cache.max_bytes in the ConfigMap: limit = request =
// cache.RSSBound(max_bytes) + 64 MiB. A request below the memory the edge
// grows to lets the scheduler overcommit the node, and the kernel then
// OOM-kills pods that are within their limit.
func TestPodMemoryFollowsCacheSize(t *testing.T) {
	maxBytes, ok := dig(fleetConfig(t), "cache", "max_bytes").(int)
	if !ok || maxBytes <= 0 {
		t.Fatalf("configmap.yaml: cache.max_bytes %v is not a positive integer", dig(fleetConfig(t), "cache", "max_bytes"))
	}
	heap := cache.RSSBound(int64(maxBytes))
	want := heap + podHeadroom
	edge := container(t, find(t, "deployment.yaml", "Deployment", "explorer-edge"), "explorer-edge")
	for _, which := range []string{"requests", "limits"} {
		q := str(edge, "resources", which, "memory")
		if got := quantity(t, q); got != want {
			t.Errorf("resources.%s.memory = %s (%d MiB), want %d MiB: the edge's RSS bound for cache.max_bytes %d MiB is %d MiB, plus %d MiB headroom",
				which, q, got>>20, want>>20, maxBytes>>20, heap>>20, podHeadroom>>20)
		}
	}
	for _, e := range list(edge, "env") {
		if str(e, "name") == "GOMEMLIMIT" {
			t.Errorf("GOMEMLIMIT=%s is set: it overrides the heap limit the edge derives from cache.max_bytes, and must be changed by hand with it", str(e, "value"))
		}
	}
}

var digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// TestImagesPinned: every image runs a fixed build: the edge's tag is set
// in kustomization.yaml (a release tag or a digest, never latest), the
// others carry a tag of their own.
func TestImagesPinned(t *testing.T) {
	var kust map[string]any
	raw, err := os.ReadFile(filepath.Join("k8s", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, img := range list(kust, "images") {
		name, tag, dig := str(img, "name"), str(img, "newTag"), str(img, "digest")
		switch {
		case dig != "" && !digest.MatchString(dig):
			t.Errorf("kustomization.yaml: image %s digest %q is not sha256:<64 hex>", name, dig)
		case dig == "" && (tag == "" || tag == "latest"):
			t.Errorf("kustomization.yaml: image %s newTag %q: pin a release tag or a digest", name, tag)
		default:
			pinned[name] = true
		}
	}
	if !pinned["explorer-edge"] {
		t.Errorf("kustomization.yaml pins no explorer-edge image")
	}
	for _, file := range []string{"deployment.yaml", "redis.yaml"} {
		for _, o := range objects(t, file) {
			for _, c := range list(o, "spec", "template", "spec", "containers") {
				image := str(c, "image")
				name, tag, hasTag := strings.Cut(image, ":")
				switch {
				case pinned[name]:
				case !hasTag || tag == "latest":
					t.Errorf("%s: container %s image %q has no fixed tag", file, str(c, "name"), image)
				}
			}
		}
	}
}

// ingressRule is one NetworkPolicy ingress rule, flattened.
type ingressRule struct {
	ports []string // port names or numbers; empty: every port
	from  []any    // peers; empty: everyone
}

func ingressRules(p object) []ingressRule {
	var out []ingressRule
	for _, r := range list(p, "spec", "ingress") {
		var ir ingressRule
		for _, port := range list(r, "ports") {
			ir.ports = append(ir.ports, fmt.Sprint(dig(port, "port")))
		}
		ir.from = list(r, "from")
		out = append(out, ir)
	}
	return out
}

// TestNetworkPolicies: the admin port (metrics, probes) is reachable from
// the monitoring namespace only, Redis from the edges only, and the public
// API from anywhere.
func TestNetworkPolicies(t *testing.T) {
	proxyPods := map[string]any{"app.kubernetes.io/name": "explorer-edge", "app.kubernetes.io/component": "proxy"}
	redisPods := map[string]any{"app.kubernetes.io/name": "explorer-edge", "app.kubernetes.io/component": "redis"}
	policyFor := func(pods map[string]any) object {
		t.Helper()
		for _, p := range objects(t, "networkpolicy.yaml") {
			if str(p, "kind") != "NetworkPolicy" {
				continue
			}
			sel, _ := dig(p, "spec", "podSelector", "matchLabels").(map[string]any)
			if fmt.Sprint(sel) == fmt.Sprint(pods) {
				if !slices.Contains(list(p, "spec", "policyTypes"), any("Ingress")) {
					t.Errorf("policy %s does not restrict Ingress", str(p, "metadata", "name"))
				}
				return p
			}
		}
		t.Fatalf("networkpolicy.yaml: no policy selects %v", pods)
		return nil
	}
	// reaches lists which peers reach port (nil entry: everyone).
	reaches := func(p object, port string) (peers []any, open bool) {
		for _, r := range ingressRules(p) {
			if len(r.ports) > 0 && !slices.Contains(r.ports, port) {
				continue
			}
			if len(r.from) == 0 {
				open = true
			}
			peers = append(peers, r.from...)
		}
		return peers, open
	}

	edge := policyFor(proxyPods)
	if _, open := reaches(edge, "http"); !open {
		t.Errorf("the public port http is not open to everyone")
	}
	peers, open := reaches(edge, "admin")
	if open || len(peers) == 0 {
		t.Fatalf("admin port: open to everyone %v, peers %v; want the monitoring namespace only", open, peers)
	}
	for _, peer := range peers {
		ns := dig(peer, "namespaceSelector", "matchLabels")
		if fmt.Sprint(ns) != "map[kubernetes.io/metadata.name:monitoring]" || dig(peer, "ipBlock") != nil {
			t.Errorf("admin port reachable from %v, want namespaceSelector kubernetes.io/metadata.name=monitoring only", peer)
		}
	}

	redis := policyFor(redisPods)
	peers, open = reaches(redis, "redis")
	if open || len(peers) == 0 {
		t.Fatalf("redis port: open to everyone %v, peers %v; want the edges only", open, peers)
	}
	for _, peer := range peers {
		pods := dig(peer, "podSelector", "matchLabels")
		if fmt.Sprint(pods) != fmt.Sprint(proxyPods) || dig(peer, "namespaceSelector") != nil || dig(peer, "ipBlock") != nil {
			t.Errorf("redis reachable from %v, want the explorer-edge proxy pods of its namespace only", peer)
		}
	}
}

// secretData is the placeholder Secret's stringData.
func secretData(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range dig(find(t, "secret.yaml", "Secret", "explorer-edge"), "stringData").(map[string]any) {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// TestEdgeSecretsByName: the edge takes each secret as one EDGE_* variable
// by secretKeyRef, every key it names exists in the Secret, and Kubernetes
// injects no service-link variables (EDGE_PORT and the like for a Service
// named edge) that the edge would read as configuration.
func TestEdgeSecretsByName(t *testing.T) {
	d := find(t, "deployment.yaml", "Deployment", "explorer-edge")
	if v, ok := dig(d, "spec", "template", "spec", "enableServiceLinks").(bool); !ok || v {
		t.Errorf("enableServiceLinks = %v, want false", dig(d, "spec", "template", "spec", "enableServiceLinks"))
	}
	edge := container(t, d, "explorer-edge")
	if dig(edge, "envFrom") != nil {
		t.Errorf("envFrom passes every key of a Secret, redis-auth.conf included; name each EDGE_* key")
	}
	data := secretData(t)
	names := map[string]bool{}
	for _, e := range list(edge, "env") {
		ref := dig(e, "valueFrom", "secretKeyRef")
		if ref == nil {
			continue
		}
		names[str(e, "name")] = true
		if str(ref, "name") != "explorer-edge" {
			continue
		}
		if _, ok := data[str(ref, "key")]; !ok {
			t.Errorf("env %s names key %q, which secret.yaml does not have", str(e, "name"), str(ref, "key"))
		}
	}
	for _, want := range []string{"EDGE_UPSTREAM__API_KEY", "EDGE_UPSTREAM__SECRET_KEY", "EDGE_UPSTREAM__PASSPHRASE", "EDGE_SHARED__REDIS_PASSWORD"} {
		if !names[want] {
			t.Errorf("the edge does not get %s from the Secret", want)
		}
	}
}

// TestRedisPasswordFromMountedSecret: redis-server reads requirepass from a
// file mounted from the Secret (never from its command line, which every
// process on the node can read in /proc), the file holds the password the
// edge uses, and a real redis-server started on the shipped redis.conf
// with that file refuses a client without it and accepts one with it.
func TestRedisPasswordFromMountedSecret(t *testing.T) {
	d := find(t, "redis.yaml", "Deployment", "explorer-edge-redis")
	redis := container(t, d, "redis")
	argv := fmt.Sprint(list(redis, "command"), list(redis, "args"))
	if strings.Contains(argv, "requirepass") || strings.Contains(argv, "$(") {
		t.Errorf("redis-server's command line carries the password: %s", argv)
	}
	conf := str(find(t, "redis.yaml", "ConfigMap", "explorer-edge-redis"), "data", "redis.conf")
	var include string
	for _, line := range strings.Split(conf, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "include" {
			include = f[1]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "requirepass") {
			t.Errorf("redis.conf (a ConfigMap) holds requirepass")
		}
	}
	if include == "" {
		t.Fatal("redis.conf includes no file (the password's)")
	}
	// The included file is a Secret item mounted at its directory.
	var volume string
	for _, m := range list(redis, "volumeMounts") {
		if str(m, "mountPath") == path.Dir(include) {
			volume = str(m, "name")
		}
	}
	var secretKey string
	for _, v := range list(d, "spec", "template", "spec", "volumes") {
		if str(v, "name") != volume || str(v, "secret", "secretName") != "explorer-edge" {
			continue
		}
		for _, item := range list(v, "secret", "items") {
			if str(item, "path") == path.Base(include) {
				secretKey = str(item, "key")
			}
		}
	}
	if secretKey == "" {
		t.Fatalf("%s is not an item of the Secret explorer-edge mounted at %s", include, path.Dir(include))
	}
	data := secretData(t)
	password := data["EDGE_SHARED__REDIS_PASSWORD"]
	if want := "requirepass " + password; data[secretKey] != want {
		t.Errorf("secret.yaml %s = %q, want %q (the edge's EDGE_SHARED__REDIS_PASSWORD)", secretKey, data[secretKey], want)
	}

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH (Debian: apt-get install redis-server): the live check is skipped")
	}
	dir := t.TempDir()
	authFile := filepath.Join(dir, path.Base(include))
	if err := os.WriteFile(authFile, []byte(data[secretKey]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confFile, []byte(strings.ReplaceAll(conf, include, authFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	// Arguments after the file override it: a loopback port, no files.
	cmd := exec.Command(bin, confFile, "--port", port, "--bind", "127.0.0.1", "--dir", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ask := func(lines ...string) []string {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		r := bufio.NewReader(c)
		var answers []string
		for _, l := range lines {
			if _, err := c.Write([]byte(l + "\r\n")); err != nil {
				return answers
			}
			a, _ := r.ReadString('\n')
			answers = append(answers, strings.TrimSpace(a))
		}
		return answers
	}
	testkit.WaitFor(t, "redis-server to listen", func() bool { return len(ask("PING")) == 1 })
	if a := ask("PING"); !strings.HasPrefix(a[0], "-NOAUTH") {
		t.Errorf("PING without the password: %q, want -NOAUTH\nredis-server: %s", a, out.String())
	}
	if a := ask("AUTH "+password, "PING"); len(a) != 2 || a[0] != "+OK" || a[1] != "+PONG" {
		t.Errorf("AUTH with EDGE_SHARED__REDIS_PASSWORD, PING: %q, want +OK +PONG", a)
	}
}

// TestKustomizationRenders builds the kustomization as `kubectl apply -k`
// would (kubectl's built-in kustomize) and checks that every file it lists
// exists and the edge's image comes out pinned.
func TestKustomizationRenders(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH: the render check is skipped (the other tests read the files)")
	}
	out, err := exec.Command(kubectl, "kustomize", "k8s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize k8s: %v\n%s", err, out)
	}
	kinds := map[string]int{}
	images := map[string]bool{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kinds[str(o, "kind")]++
		for _, c := range list(o, "spec", "template", "spec", "containers") {
			images[str(c, "image")] = true
		}
	}
	for kind, n := range map[string]int{"Deployment": 2, "NetworkPolicy": 2, "PrometheusRule": 1, "ServiceMonitor": 1, "Secret": 1} {
		if kinds[kind] != n {
			t.Errorf("rendered %d %s, want %d", kinds[kind], kind, n)
		}
	}
	for image := range images {
		if name, tag, _ := strings.Cut(image, ":"); name == "explorer-edge" && (tag == "" || tag == "latest") {
			t.Errorf("rendered image %q is not pinned", image)
		}
	}
}
