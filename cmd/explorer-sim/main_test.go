package main

import (
	"strings"
	"testing"

	"explorer-edge/sim"
)

// -profile reads the names sim.ParseProfile reads, defaults to
// sim.DefaultProfile and names a bad one; -fault-envelope-vendor reaches
// the faults.
func TestProfileFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Profile == nil || *o.cfg.Profile != sim.MustProfile(sim.DefaultProfile) {
		t.Errorf("no -profile: %v, want sim.DefaultProfile", o.cfg.Profile)
	}
	o, err = parseFlags([]string{"-profile", "vendor,cross-id-other", "-fault-envelope", "1", "-fault-envelope-code", "50043", "-fault-envelope-vendor"})
	if err != nil {
		t.Fatal(err)
	}
	want := sim.Profile{HeightAt: true, StatusVendor: true, CrossIDOther: true}
	if *o.cfg.Profile != want {
		t.Errorf("-profile vendor,cross-id-other: %v, want %v", *o.cfg.Profile, want)
	}
	if f := o.cfg.Faults; !f.EnvelopeVendor || f.EnvelopeCode != "50043" || f.Envelope != 1 {
		t.Errorf("fault flags: %+v", f)
	}
	if _, err := parseFlags([]string{"-profile", "vendor,heigth-at"}); err == nil || !strings.Contains(err.Error(), "-profile") || !strings.Contains(err.Error(), "heigth-at") {
		t.Errorf("-profile with a misspelt name: %v", err)
	}
	if _, err := parseFlags([]string{"-fault-envelope-vendor", "-fault-envelope-code", "59999"}); err == nil || !strings.Contains(err.Error(), "envelope_code") {
		t.Errorf("-fault-envelope-vendor with a code outside the table: %v", err)
	}
}
