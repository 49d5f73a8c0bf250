package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// With SOAK_TEST_SERVE set, the test binary is a child that answers 200 on
// that address (for TestStartOnFreePortsRetries).
func TestMain(m *testing.M) {
	if addr := os.Getenv("SOAK_TEST_SERVE"); addr != "" {
		http.ListenAndServe(addr, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// A child that exits before it is ready, as one whose port was taken does,
// is started again on new ports.
func TestStartOnFreePortsRetries(t *testing.T) {
	dir := t.TempDir()
	tries := 0
	c, err := startOnFreePorts(context.Background(), 1, func(addrs []string) (*child, string, error) {
		tries++
		log := filepath.Join(dir, "child.log")
		if tries == 1 {
			c, err := startChild("exits", "/bin/sh", []string{"-c", "exit 3"}, log)
			return c, "http://" + addrs[0] + "/", err
		}
		t.Setenv("SOAK_TEST_SERVE", addrs[0])
		c, err := startChild("serves", os.Args[0], nil, log)
		return c, "http://" + addrs[0] + "/", err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.kill()
	if tries != 2 || !c.alive() {
		t.Fatalf("%d tries, alive %v; want a second, running child", tries, c.alive())
	}
}
