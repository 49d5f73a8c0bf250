package main

import (
	"strings"
	"testing"
	"time"
)

// TestMovingJudgeCatchesWrongAnswers feeds the moving chain's judge edge
// answers a correct edge could not give (and some it could), with the
// upstream's answers taken from the reference clock, so that the phase
// cannot pass by judging nothing.
func TestMovingJudgeCatchesWrongAnswers(t *testing.T) {
	ref := newRefClock()
	defer ref.close()
	// A moment 300 ms into a block: the chain's head changes on whole seconds.
	base := time.Date(2026, 6, 1, 12, 0, 0, 300e6, time.UTC)
	m := &moving{ref: ref, start: base.Add(-20 * time.Second), cfg: movingConfig{t0: base}}

	const newest = "/api/v5/chainx/block/block-list?chainShortName=CHAINX"
	const page2 = newest + "&limit=5&page=2"
	said := func(target string, ago time.Duration) reply { return ref.said(target, base.Add(-ago)) }
	type answer struct {
		r                reply
		maxAge, swr, age int64
		encoded          bool
	}
	cases := []struct {
		name   string
		target string
		tip    bool
		hist   []sighting // before the round's own direct answers
		a      answer
		want   string // "" right; else a word of the reason
	}{
		{"newest page, current", newest, true, nil, answer{said(newest, 0), 1, 1, 0, false}, ""},
		{"newest page, 2 blocks behind", newest, true, nil, answer{said(newest, 2*time.Second), 1, 1, 2, false}, ""},
		{"newest page, 3 blocks behind", newest, true, nil, answer{said(newest, 3*time.Second), 1, 30, 3, false}, "blocks behind"},
		{"head page, Age honest", page2, false, nil, answer{said(page2, 2*time.Second), 1, 1, 2, false}, ""},
		{"head page, Age says younger", page2, false, nil, answer{said(page2, 2*time.Second), 1, 1, 0, false}, "Age says 0"},
		{"head page, beyond its windows", page2, false, nil, answer{said(page2, 5*time.Second), 1, 1, 5, false}, "beyond max-age"},
		{"head page, within a long declared window", page2, false, nil, answer{said(page2, 5*time.Second), 1, 30, 5, false}, ""},
		{"declared final, changed since", page2, false, nil, answer{said(page2, 2*time.Second), 86400, 30, 2, false}, "declared final"},
		{"declared final, current", page2, false, nil, answer{said(page2, 0), 86400, 30, 2, false}, ""},
		{"bytes never said", page2, false, nil, answer{reply{200, `{"code":"0","data":[],"msg":""}`}, 1, 1, 0, false}, "never said"},
		{"503 while the upstream answers", page2, false, nil, answer{reply{503, `{"code":"50001","data":[],"msg":"x"}`}, -1, -1, 0, false}, "503 while"},
		{"gzip not asked for", page2, false, nil, answer{said(page2, 0), 1, 1, 0, true}, "Content-Encoding"},
		// Placed by the record of direct answers alone (the reference
		// clock never says "A"): outdated since B was first seen.
		{"history, Age honest", page2, false, []sighting{{reply{200, "A"}, base.Add(-4 * time.Second)}, {reply{200, "B"}, base.Add(-2 * time.Second)}},
			answer{reply{200, "A"}, 1, 1, 2, false}, ""},
		{"history, Age says younger", page2, false, []sighting{{reply{200, "A"}, base.Add(-4 * time.Second)}, {reply{200, "B"}, base.Add(-2 * time.Second)}},
			answer{reply{200, "A"}, 1, 1, 0, false}, "placed by the history"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tgt := &movingTarget{path: c.target, tip: c.tip, hist: append([]sighting(nil), c.hist...)}
			before := observation{said(c.target, 0), base.Add(-5 * time.Millisecond), base}
			after := observation{ref.said(c.target, base.Add(20*time.Millisecond)), base.Add(15 * time.Millisecond), base.Add(20 * time.Millisecond)}
			tgt.record(before)
			tgt.record(after)
			e := edgeReply{reply: c.a.r, send: base.Add(5 * time.Millisecond), recv: base.Add(10 * time.Millisecond),
				maxAge: c.a.maxAge, swr: c.a.swr, age: c.a.age, contentEncoded: c.a.encoded}
			v := m.judge(tgt, before, e, after)
			switch {
			case c.want == "" && v.why != "":
				t.Errorf("judged wrong: %s", v.why)
			case c.want != "" && !strings.Contains(v.why, c.want):
				t.Errorf("judged %q, want a reason with %q", v.why, c.want)
			case (v.why == "") != (v.rule == ""):
				t.Errorf("reason %q, rule %q", v.why, v.rule)
			}
		})
	}
	// The reference clock agrees with itself across a block boundary.
	if !ref.saidDuring(newest, base.Add(-time.Second), base, said(newest, time.Second)) {
		t.Error("saidDuring misses the answer at its own start")
	}
	if ref.saidDuring(newest, base.Add(-2*time.Second), base.Add(-1500*time.Millisecond), said(newest, 0)) {
		t.Error("saidDuring finds an answer of a later block")
	}
}
