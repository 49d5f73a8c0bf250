package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Profile is explorer-sim's reading of each point where the vendor's
// documentation of the explorer is silent or says two things
// (docs/explorer-readings.md has the table: the vendor's words, where,
// and what the edge does). The zero value is today's reading of every
// point, the one the sim always had.
type Profile struct {
	// HeightAt: block-list with height=X answers the block at X only, one
	// block (the vendor's v6 page: "when given, queries the block at that
	// height"). Off (height-down): the blocks from X downward, a page of them.
	HeightAt bool
	// CrossIDOther: a cross-chain record's id is not the hash asked; the
	// hash asked (the TradeZone side, as the vendor names txId) is in
	// tzTxHash, and id is another hash that opens nothing. Off: id is the
	// hash asked, in lower case.
	CrossIDOther bool
	// UpdateMoves: a cross-chain record's updateTime keeps moving for
	// UpdateMoveFor after the profile is set (the sim's start, or
	// SetProfile): each answer in that time carries the chain time of the
	// answer, then the end of it, fixed. Off: updateTime never changes.
	UpdateMoves bool
	// StateEmpty: every block's state is "" (the vendor's v6 page: empty
	// where it does not apply). Off: "pending" for the newest PendingDepth
	// blocks, "done" below.
	StateEmpty bool
	// NoDataCode: a height above the head (block-list, transaction-list)
	// answers code 50040 "no data for this block height" with the vendor's
	// HTTP status, 200. Off: code 0 with an empty list.
	NoDataCode bool
	// PositionLimit100: position-list accepts limit up to 100 (the vendor's
	// Chinese page). Off: up to 50 (its English page).
	PositionLimit100 bool
	// StatusVendor: the sim's own refusals carry the vendor's documented
	// HTTP status for their code (50025 "count exceeds the limit" with 200).
	// Off: 400 for every refusal of a parameter.
	StatusVendor bool
}

// UpdateMoveFor is how long the updateTime of a cross-chain record moves
// under the update-moves reading, from the time the profile was set.
const UpdateMoveFor = 5 * time.Minute

// DefaultProfile names the profile explorer-sim uses when none is asked
// for (-profile, Config.Profile): the vendor's documented readings, so
// that make run and the tests face what the real explorer does; "today"
// is the sim's old reading of every point (height-down among them).
const DefaultProfile = "vendor"

// reading is one named reading of one point.
type reading struct {
	name, point string
	on          bool
	field       func(*Profile) *bool
}

// readings lists every reading, two per point (the second the zero value,
// today's), in the order String writes them.
var readings = []reading{
	{"height-at", "height", true, func(p *Profile) *bool { return &p.HeightAt }},
	{"height-down", "height", false, func(p *Profile) *bool { return &p.HeightAt }},
	{"cross-id-other", "cross-id", true, func(p *Profile) *bool { return &p.CrossIDOther }},
	{"cross-id-asked", "cross-id", false, func(p *Profile) *bool { return &p.CrossIDOther }},
	{"update-moves", "update", true, func(p *Profile) *bool { return &p.UpdateMoves }},
	{"update-fixed", "update", false, func(p *Profile) *bool { return &p.UpdateMoves }},
	{"state-empty", "state", true, func(p *Profile) *bool { return &p.StateEmpty }},
	{"state-pending-done", "state", false, func(p *Profile) *bool { return &p.StateEmpty }},
	{"nodata-code", "nodata", true, func(p *Profile) *bool { return &p.NoDataCode }},
	{"nodata-empty", "nodata", false, func(p *Profile) *bool { return &p.NoDataCode }},
	{"position-limit-100", "position-limit", true, func(p *Profile) *bool { return &p.PositionLimit100 }},
	{"position-limit-50", "position-limit", false, func(p *Profile) *bool { return &p.PositionLimit100 }},
	{"status-vendor", "status", true, func(p *Profile) *bool { return &p.StatusVendor }},
	{"status-400", "status", false, func(p *Profile) *bool { return &p.StatusVendor }},
}

// namedProfiles are the profiles that set every point at once.
var namedProfiles = map[string]Profile{
	// today: the sim as it always was.
	"today": {},
	// vendor: what the vendor documents, where it does: height is the block
	// at that height (v6 page), codes carry the table's HTTP status. The
	// points it leaves open keep today's reading.
	"vendor": {HeightAt: true, StatusVendor: true},
	// every: each reading that differs from today's, all together.
	"every": {HeightAt: true, CrossIDOther: true, UpdateMoves: true, StateEmpty: true,
		NoDataCode: true, PositionLimit100: true, StatusVendor: true},
}

// ProfileNames lists every name ParseProfile accepts: the named profiles,
// then the readings.
func ProfileNames() []string {
	out := []string{"today", "vendor", "every"}
	for _, r := range readings {
		out = append(out, r.name)
	}
	return out
}

// ParseProfile reads a comma-separated list of profile and reading names,
// applied in order from today's profile: "vendor,cross-id-other" is the
// vendor's profile with the other reading of the cross-chain id. Names
// are case-insensitive; empty means DefaultProfile.
func ParseProfile(s string) (Profile, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultProfile
	}
	var p Profile
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		name := strings.ToLower(strings.TrimSpace(item))
		if np, ok := namedProfiles[name]; ok {
			p = np
			continue
		}
		found := false
		for _, r := range readings {
			if r.name == name {
				*r.field(&p) = r.on
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%q is not a profile or reading name (%s)", name, strings.Join(ProfileNames(), ", ")))
		}
	}
	if len(errs) > 0 {
		return Profile{}, errors.Join(errs...)
	}
	return p, nil
}

// MustProfile is ParseProfile for names known to be right (tests, constants).
func MustProfile(s string) Profile {
	p, err := ParseProfile(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String names the reading of every point, comma-separated, in a form
// ParseProfile reads back.
func (p Profile) String() string {
	var names []string
	for _, r := range readings {
		if *r.field(&p) == r.on {
			names = append(names, r.name)
		}
	}
	return strings.Join(names, ",")
}

// MarshalText writes String, so JSON shows the readings by name.
func (p Profile) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads what ParseProfile reads.
func (p *Profile) UnmarshalText(b []byte) error {
	q, err := ParseProfile(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// profileState is the profile in force and the chain time it was set at
// (where update-moves starts counting).
type profileState struct {
	Profile
	since time.Time
}

// Profile returns the profile in force.
func (s *Server) Profile() Profile {
	s.profileMu.Lock()
	defer s.profileMu.Unlock()
	return s.profile.Profile
}

// SetProfile replaces the profile in force; answers after it follow p.
// The update-moves reading counts UpdateMoveFor from now (chain time).
func (s *Server) SetProfile(p Profile) {
	s.profileMu.Lock()
	s.profile = profileState{p, s.cfg.Now()}
	s.profileMu.Unlock()
	s.log.Info("profile set", "profile", p.String())
}

func (s *Server) profileNow() profileState {
	s.profileMu.Lock()
	defer s.profileMu.Unlock()
	return s.profile
}
