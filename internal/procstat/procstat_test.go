package procstat

import "testing"

func TestKB(t *testing.T) {
	rss, err := KB(0, "VmRSS")
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	if hwm, err := KB(0, "VmHWM"); err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("VmRSS %d kB, VmHWM %d kB (%v)", rss, hwm, err)
	}
	if _, err := KB(0, "NoSuchField"); err == nil {
		t.Fatal("a field /proc does not have was found")
	}
}
