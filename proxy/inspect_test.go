package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/internal/testkit"
	"explorer-edge/proxy/admin"
	"explorer-edge/sim"
)

// adminGet sends method path to the admin port with the Authorization
// header auth ("" = none).
func (h *harness) adminGet(method, path, auth string) resp {
	h.t.Helper()
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + h.admin() + path)
	req.Header.SetMethod(method)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if err := h.hc.DoTimeout(req, res, 10*time.Second); err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	r := resp{status: res.StatusCode(), header: map[string]string{}, body: bytes.Clone(res.Body())}
	for k, v := range res.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r
}

// inspectData asks path with the token and decodes the envelope's one
// item into out; anything but a 200 of code "0" fails the test.
func (h *harness) inspectData(path string, out any) {
	h.t.Helper()
	r := h.adminGet("GET", path, "Bearer "+testPurgeToken)
	var env struct {
		Code string            `json:"code"`
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); r.status != 200 || err != nil || env.Code != "0" || len(env.Data) != 1 {
		h.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	if err := json.Unmarshal(env.Data[0], out); err != nil {
		h.t.Fatalf("GET %s: %v in %s", path, err, env.Data[0])
	}
}

// inspectURL is GET /cache?url=target.
func (h *harness) inspectURL(target string) admin.Inspected {
	h.t.Helper()
	var out admin.Inspected
	h.inspectData("/cache?url="+url.QueryEscape(target), &out)
	return out
}

// TestInspectCacheWholeKey: GET /cache tells what the edge holds for a
// question of a whole-key route, normalized as the public path does,
// without asking the upstream: nothing before the first ask, then the
// entry's class, times, sizes, ETag, source and tags; a stale entry whose
// refresh is under way says so; a URL the public path refuses is refused
// with the same envelope.
func TestInspectCacheWholeKey(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	height := h.sim.FinalizedHeight("CHAINX") - 2
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", height)
	key := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=CHAINX&height=%d&protocolType=transaction&page=1&limit=20", height)

	// Nothing held: a miss, and no upstream call to find out.
	before := h.upstreamCalls()
	got := h.inspectURL(target)
	if got.Key != key || got.Route != "transaction-list" || got.Chain != "CHAINX" || got.State != "miss" || got.Entry != nil || got.Refreshing || got.Parts != nil {
		t.Fatalf("before any ask: %+v", got)
	}
	if n := h.upstreamCalls() - before; n != 0 {
		t.Fatalf("GET /cache cost %d upstream calls", n)
	}

	blocks := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	h.get(blocks) // the edge learns the finalized height: the page is final
	first := h.get(target)
	if first.status != 200 || !isMiss(first) {
		t.Fatalf("first ask: %d %q", first.status, first.header["Cache-Status"])
	}
	identity := h.get(target) // no Accept-Encoding: the identity body
	calls := h.upstreamCalls()
	// Spelled otherwise (case, leading zeros, a parameter no route takes,
	// a full URL): the same key.
	got = h.inspectURL(fmt.Sprintf("http://edge.example/api/v5/chainx/block/transaction-list?foo=1&height=000%d&chainShortName=ChainX&page=1", height))
	if h.upstreamCalls() != calls {
		t.Fatalf("GET /cache of a cached key asked the upstream")
	}
	e := got.Entry
	if got.Key != key || got.State != "fresh" || got.Refreshing || e == nil {
		t.Fatalf("after the ask: %+v", got)
	}
	now := h.clock.Now().UTC()
	if e.Class != "final" || e.Source != "upstream" || e.Status != 0 {
		t.Errorf("class %q source %q status %d, want final, upstream, 0", e.Class, e.Source, e.Status)
	}
	if e.Stored != now.Format(time.RFC3339Nano) || e.Fresh != now.Add(24*time.Hour).Format(time.RFC3339Nano) || e.Age != 0 || e.TTL != 86400 {
		t.Errorf("stored %s fresh_until %s age %v ttl %v; want stored now (%s), fresh 24h, age 0", e.Stored, e.Fresh, e.Age, e.TTL, now.Format(time.RFC3339Nano))
	}
	if e.StaleWhileRevalidate != now.Add(24*time.Hour+30*time.Second).Format(time.RFC3339Nano) ||
		e.StaleIfError != now.Add(24*time.Hour+10*time.Minute).Format(time.RFC3339Nano) {
		t.Errorf("stale windows end %s and %s", e.StaleWhileRevalidate, e.StaleIfError)
	}
	if e.ETag != identity.header["Etag"] || e.SizeIdentity != len(identity.body) {
		t.Errorf("etag %s size_identity %d; the answer's ETag %s and %d bytes", e.ETag, e.SizeIdentity, identity.header["Etag"], len(identity.body))
	}
	if !e.Gzip || e.SizeStored <= 0 || e.SizeStored >= e.SizeIdentity || e.Cost < int64(e.SizeStored) {
		t.Errorf("gzip %v size_stored %d cost %d of %d identity bytes", e.Gzip, e.SizeStored, e.Cost, e.SizeIdentity)
	}
	if tg := e.Tags; tg.Route != "transaction-list" || tg.Chain != "CHAINX" || tg.Heights == nil || *tg.Heights != (admin.Heights{From: height, To: height}) || tg.Hashes != 0 {
		t.Errorf("tags %+v (heights %v), want transaction-list CHAINX %d..%d", tg, tg.Heights, height, height)
	}
	h.clock.Advance(90 * time.Second)
	if got = h.inspectURL(target); got.Entry.Age != 90 || got.Entry.TTL != 86400-90 {
		t.Errorf("90 s later: age %v ttl %v", got.Entry.Age, got.Entry.TTL)
	}

	// A stale head page whose refresh is held at the upstream.
	h.get(blocks)                            // expired 90 s ago: asked again
	h.clock.Advance(1500 * time.Millisecond) // fresh 1 s, stale-while-revalidate 1 s
	gate := h.holdUpstream()
	defer gate.release()
	if r := h.get(blocks); !strings.Contains(r.header["Cache-Status"], "stale") {
		t.Fatalf("not served stale: %q", r.header["Cache-Status"])
	}
	gate.waitArrived(t, 1)
	if got = h.inspectURL(blocks); got.State != "stale" || !got.Refreshing || got.Entry.Class != "head" || got.Entry.Tags.Route != "block-list" {
		t.Fatalf("stale while its refresh is held: %+v", got)
	}
	gate.release()
	testkit.WaitFor(t, "the refresh to end", func() bool {
		got = h.inspectURL(blocks)
		return !got.Refreshing && got.State == "fresh"
	})

	// What the public path refuses, refused the same way.
	for _, bad := range []string{
		"/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=abc",
		"/api/v5/chainx/block/transaction-list?chainShortName=nochain&height=1",
		"/api/v5/chainx/block/block-list?chainShortName=chainx&page=1000&limit=100",
		"/api/v5/chainx/tz/cross/transaction-multi?chainShortName=chainx",
	} {
		pub := h.get(bad)
		adm := h.adminGet("GET", "/cache?url="+url.QueryEscape(bad), "Bearer "+testPurgeToken)
		if pub.status != 400 || adm.status != pub.status || !bytes.Equal(adm.body, pub.body) {
			t.Errorf("%s: admin %d %s, public %d %s", bad, adm.status, adm.body, pub.status, pub.body)
		}
	}
	for path, want := range map[string]string{
		"/cache":                        `{"code":"50014","msg":"Parameter url cannot be empty","data":[]}`,
		"/cache?url=%2Fapi%2Fv5%2Fnope": `Parameter url error: path is none of the six routes`,
	} {
		if r := h.adminGet("GET", path, "Bearer "+testPurgeToken); r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s, want 400 %s", path, r.status, r.body, want)
		}
	}
}

// TestInspectCachePerHash: a per-hash route's question lists each hash's
// own entry: after a request for two of three hashes, the third is a
// miss and the whole answer is not held; once asked, the answer is held
// as assembled from its parts, which came from the upstream.
func TestInspectCachePerHash(t *testing.T) {
	h := newHarness(t, withPurgeToken)
	hashes := h.sim.CrossHashes("TRADE_ZONE", 3)
	two := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=trade_zone&txId=" + strings.Join(hashes[:2], ",")
	three := "/api/v5/chainx/tz/cross/transaction-multi?chainShortName=TRADE_ZONE&txId=" + strings.ToUpper(strings.Join(hashes, ","))
	if r := h.get(two); r.status != 200 || r.code() != "0" {
		t.Fatalf("two hashes: %d %s", r.status, r.body)
	}
	got := h.inspectURL(three)
	if got.State != "miss" || got.Entry != nil || len(got.Parts) != 3 {
		t.Fatalf("three hashes, two held: %+v", got)
	}
	for i, part := range got.Parts {
		wantKey := "hash|TRADE_ZONE|" + strings.ToLower(hashes[i])
		if part.Hash != strings.ToLower(hashes[i]) || part.Key != wantKey || part.Fetching || part.Refreshing {
			t.Errorf("part %d: %+v, want key %s", i, part, wantKey)
		}
		held := i < 2
		if !held {
			if part.State != "miss" || part.Entry != nil {
				t.Errorf("part %d (not asked yet): %s %+v", i, part.State, part.Entry)
			}
			continue
		}
		if part.State != "fresh" || part.Entry == nil || part.Entry.Source != "upstream" || part.Entry.Tags.Route != "per-hash" ||
			part.Entry.Tags.Chain != "TRADE_ZONE" || part.Entry.Tags.Hashes != 1 || part.Entry.Gzip {
			t.Errorf("part %d: %s %+v", i, part.State, part.Entry)
		}
	}
	if r := h.get(three); r.status != 200 || r.code() != "0" {
		t.Fatalf("three hashes: %d %s", r.status, r.body)
	}
	got = h.inspectURL(three)
	if got.State != "fresh" || got.Entry == nil || got.Entry.Source != "assembled" || got.Entry.Tags.Route != "transaction-multi" || got.Entry.Tags.Hashes != 3 {
		t.Fatalf("three hashes, asked: %s %+v", got.State, got.Entry)
	}
	for i, part := range got.Parts {
		if part.State != "fresh" || part.Entry == nil || part.Entry.Source != "upstream" {
			t.Errorf("part %d after the ask: %s %+v", i, part.State, part.Entry)
		}
	}
	// transaction-fills answers from the same parts.
	fills := h.inspectURL("/api/v5/chainx/tz/cross/transaction-fills?chainShortName=TRADE_ZONE&txid=" + hashes[2])
	if len(fills.Parts) != 1 || fills.Parts[0].State != "fresh" || fills.State != "miss" {
		t.Fatalf("transaction-fills of a held hash: %+v", fills)
	}
}

// TestInspectCacheSourceShared: an answer another node of the fleet
// fetched is held, on the node that read it from Redis, as from the
// shared tier.
func TestInspectCacheSourceShared(t *testing.T) {
	rdb := startRedis(t)
	h, edges := newFleet(t, rdb, 2, withPurgeToken)
	target := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.sim.FinalizedHeight("CHAINX")-3)
	if r := edges[0].get(target); !isMiss(r) {
		t.Fatalf("first node: %q", r.header["Cache-Status"])
	}
	if r := edges[1].get(target); !strings.Contains(r.header["Cache-Status"], "shared") {
		t.Fatalf("second node: %q", r.header["Cache-Status"])
	}
	for i, want := range []string{"upstream", "shared"} {
		if got := edges[i].inspectURL(target); got.Entry == nil || got.Entry.Source != want {
			t.Errorf("node %d: %+v, want source %s", i, got.Entry, want)
		}
	}
}

// TestInspectRefusals: /cache, /cache/top and /config are refused as POST
// /purge is: 404 while no token is configured, 401 without the token or
// with a wrong one (nothing of the cache in the answer), 405 for a method
// other than GET.
func TestInspectRefusals(t *testing.T) {
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	paths := []string{"/cache?url=" + url.QueryEscape(target), "/cache/top", "/config"}
	off := newHarness(t)
	off.get(target)
	for _, path := range paths {
		if r := off.adminGet("GET", path, "Bearer "+testPurgeToken); r.status != 404 || r.code() != "404" {
			t.Errorf("no token configured, %s: %d %s", path, r.status, r.body)
		}
	}
	h := newHarness(t, withPurgeToken)
	h.get(target)
	for _, path := range paths {
		for _, c := range []struct {
			method, auth string
			status       int
			code         string
		}{
			{"GET", "", 401, "50103"},
			{"GET", "Basic " + testPurgeToken, 401, "50103"},
			{"GET", "Bearer wrong-token-0123456789abcdef", 401, "50111"},
			{"POST", "Bearer " + testPurgeToken, 405, "50115"},
		} {
			r := h.adminGet(c.method, path, c.auth)
			if r.status != c.status || r.code() != c.code || strings.Contains(string(r.body), "block-list") || strings.Contains(string(r.body), "upstream") {
				t.Errorf("%s %s (%q): %d %s, want %d/%s", c.method, path, c.auth, r.status, r.body, c.status, c.code)
			}
			if c.status == 401 && r.header["Www-Authenticate"] == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, path)
			}
			if c.status == 405 && r.header["Allow"] != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", c.method, path, r.header["Allow"])
			}
		}
	}
	// The purge refusals are unchanged by their sharing the check.
	if r := h.purgeAs("Bearer wrong-token-0123456789abcdef", `{"all":true}`); r.status != 401 || r.code() != "50111" {
		t.Errorf("purge with a wrong token: %d %s", r.status, r.body)
	}
	if r := off.purgeAs("Bearer "+testPurgeToken, `{"all":true}`); r.status != 404 || !strings.Contains(string(r.body), "purge is off") {
		t.Errorf("purge off: %d %s", r.status, r.body)
	}
}

func withTopSample(n int) harnessOpt {
	return func(c *config.Config, _ *sim.Config) { c.Admin.TopSample = n }
}

// TestInspectTop: GET /cache/top lists the most-asked keys, most first,
// counted by normalized key (two spellings are one key); counts halve
// each minute and keys counted down to nothing leave; off, it lists none.
func TestInspectTop(t *testing.T) {
	h := newHarness(t, withPurgeToken, withTopSample(1)) // every request counted: exact
	a := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=5"
	b := fmt.Sprintf("/api/v5/chainx/block/transaction-list?chainShortName=chainx&height=%d", h.sim.FinalizedHeight("CHAINX")-2)
	c := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=7"
	for i := range 8 {
		target := a
		if i%2 == 1 {
			target = strings.Replace(a, "chainx&", "CHAINX&page=1&", 1) // the same question
		}
		h.get(target)
	}
	for range 4 {
		h.get(b)
	}
	h.get(c)
	var top admin.Report
	h.inspectData("/cache/top?n=2", &top)
	if top.Every != 1 || top.Sampled != 13 || top.Requests != 13 || top.Slots != 256 || len(top.Keys) != 2 {
		t.Fatalf("top: %+v", top)
	}
	want := []admin.TopKey{
		{Key: cacheKey(t, h.p, a), Route: "block-list", Requests: 8, Share: 0.6154},
		{Key: cacheKey(t, h.p, b), Route: "transaction-list", Requests: 4, Share: 0.3077},
	}
	for i := range want {
		if top.Keys[i] != want[i] {
			t.Errorf("top[%d] = %+v, want %+v", i, top.Keys[i], want[i])
		}
	}
	h.clock.Advance(time.Minute)
	h.inspectData("/cache/top", &top)
	if len(top.Keys) != 2 || top.Keys[0].Requests != 4 || top.Keys[1].Requests != 2 || top.Sampled != 6 {
		t.Fatalf("a minute later (halved; the key asked once gone): %+v", top)
	}
	for _, n := range []string{"0", "257", "x"} {
		if r := h.adminGet("GET", "/cache/top?n="+n, "Bearer "+testPurgeToken); r.status != 400 || !strings.Contains(string(r.body), "Parameter n error") {
			t.Errorf("n=%s: %d %s", n, r.status, r.body)
		}
	}

	// Off by a reload: nothing counted.
	cfg := h.cfg
	cfg.Admin.TopSample = 0
	if err := h.p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h.get(a)
	h.inspectData("/cache/top", &top)
	if top.Every != 0 || len(top.Keys) != 0 || top.Sampled != 0 {
		t.Fatalf("off: %+v", top)
	}
}

// TestTopSamplingAllocatesNothing: a hit allocates nothing with the
// sampling off, at its default (1 in 64) and counting every request.
func TestTopSamplingAllocatesNothing(t *testing.T) {
	if testkit.Race {
		t.Skip("allocation counts are meaningless under -race")
	}
	target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
	for _, every := range []int{0, 64, 1} {
		t.Run(fmt.Sprint("top_sample=", every), func(t *testing.T) {
			h := newHarness(t, withTopSample(every))
			if r := h.get(target); r.status != 200 {
				t.Fatalf("warm: %d", r.status)
			}
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI(target)
			ctx.Request.Header.SetMethod("GET")
			for range 1000 {
				ctx.Response.Reset()
				h.p.Handle(&ctx)
			}
			allocs := testing.AllocsPerRun(500, func() {
				ctx.Response.Reset()
				h.p.Handle(&ctx)
			})
			if ctx.Response.StatusCode() != 200 || allocs != 0 {
				t.Fatalf("hit: status %d, %v allocations per request, want 0", ctx.Response.StatusCode(), allocs)
			}
			rep := h.p.ops.top.Report(1, h.clock.Now().UnixNano())
			switch {
			case every == 0 && rep.Sampled != 0:
				t.Fatalf("off, yet %d sampled", rep.Sampled)
			case every == 1 && rep.Sampled != 1+1000+501: // AllocsPerRun runs once more to warm up
				t.Fatalf("every request: %d sampled, want 1502", rep.Sampled)
			case every > 0 && (len(rep.Keys) != 1 || rep.Keys[0].Key != cacheKey(t, h.p, target)):
				t.Fatalf("top: %+v", rep)
			}
		})
	}
}

// BenchmarkHitTopSample is BenchmarkHit with GET /cache/top's sampling
// off, at its default (1 in 64) and counting every request (the cost of
// a sampled request: a mutex, a hash and a scan of the table).
func BenchmarkHitTopSample(b *testing.B) {
	for _, every := range []int{0, 64, 1} {
		b.Run(fmt.Sprint("every=", every), func(b *testing.B) {
			h := newHarness(b, withTopSample(every))
			target := "/api/v5/chainx/block/block-list?chainShortName=chainx&limit=20"
			if r := h.get(target); r.status != 200 {
				b.Fatalf("warm: %d %s", r.status, r.body)
			}
			parallelHits(b, h.p, target)
		})
	}
}

// TestInspectConfig: GET /config shows the configuration in force with
// every secret redacted, its hash (the one config_hash_info carries), when
// it was applied (config_last_reload_success_timestamp_seconds) and the
// last reload's outcome.
func TestInspectConfig(t *testing.T) {
	const redisPassword = "redis-password-never-shown-0001"
	const clientSecret = "client-secret-never-shown-00002"
	const clientPass = "client-passphrase-never-shown-3"
	const clientKey = "client-api-key-shown-by-prefix-4"
	h := newHarness(t, withPurgeToken, func(c *config.Config, _ *sim.Config) {
		c.Shared.RedisPassword = redisPassword
		// Never dialed: the harness wires no tracer.
		c.Tracing.OTLPEndpoint = "http://edge:" + redisPassword + "@collector.example:4318"
		c.Auth.Clients = []config.Client{{Name: "web", APIKey: clientKey, SecretKey: clientSecret, Passphrase: clientPass, Rate: 10, Burst: 10}}
	})
	start := h.clock.Now()
	type configAnswer struct {
		Hash       string               `json:"hash"`
		Applied    string               `json:"applied"`
		Started    string               `json:"started"`
		LastReload *admin.ReloadOutcome `json:"last_reload"`
		Config     json.RawMessage      `json:"config"`
	}
	get := func() (configAnswer, string) {
		t.Helper()
		r := h.adminGet("GET", "/config", "Bearer "+testPurgeToken)
		var env struct {
			Data []configAnswer `json:"data"`
		}
		if err := json.Unmarshal(r.body, &env); r.status != 200 || err != nil || len(env.Data) != 1 {
			t.Fatalf("/config: %d %s", r.status, r.body)
		}
		return env.Data[0], string(r.body)
	}
	got, body := get()
	for _, secret := range []string{sim.DemoSecretKey, sim.DemoPassphrase, testPurgeToken, redisPassword, clientSecret, clientPass,
		sim.DemoAPIKey, clientKey} { // api keys: a prefix at most
		if strings.Contains(body, secret) {
			t.Errorf("/config shows a secret (%.6s...)", secret)
		}
	}
	if !strings.Contains(body, `"api_key":"clie…"`) {
		t.Errorf("/config does not show the client's api key by its prefix:\n%s", body)
	}
	var shown struct {
		Tracing struct {
			OTLPEndpoint string `json:"otlp_endpoint"`
		} `json:"tracing"`
		Upstream struct {
			BaseURL   string `json:"base_url"`
			SecretKey string `json:"secret_key"`
			APIKey    string `json:"api_key"`
			Timeout   string `json:"timeout"`
		} `json:"upstream"`
		Shared struct {
			RedisPassword string `json:"redis_password"`
			RedisUsername string `json:"redis_username"`
		} `json:"shared"`
		Admin struct {
			PurgeToken string `json:"purge_token"`
			TopSample  int    `json:"top_sample"`
		} `json:"admin"`
		Cache struct {
			MaxBytes int64 `json:"max_bytes"`
		} `json:"cache"`
	}
	if err := json.Unmarshal(got.Config, &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Upstream.SecretKey != "xxxxx" || shown.Shared.RedisPassword != "xxxxx" || shown.Admin.PurgeToken != "xxxxx" || shown.Shared.RedisUsername != "" ||
		shown.Tracing.OTLPEndpoint != "http://xxxxx@collector.example:4318" || shown.Upstream.BaseURL != h.cfg.Upstream.BaseURL || shown.Upstream.APIKey != config.ShownKey(sim.DemoAPIKey) ||
		shown.Upstream.Timeout != "2s" || shown.Cache.MaxBytes != 64<<20 || shown.Admin.TopSample != 64 {
		t.Errorf("shown: %+v", shown)
	}
	// The hash is of the redacted configuration as canonical JSON.
	var canonical any
	dec := json.NewDecoder(bytes.NewReader(got.Config))
	dec.UseNumber()
	if err := dec.Decode(&canonical); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(canonical)
	sum := sha256.Sum256(b)
	if got.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s is not the sha256 of the configuration shown", got.Hash)
	}
	if v := testutil.ToFloat64(h.m.ConfigHash.WithLabelValues(got.Hash)); v != 1 || testutil.CollectAndCount(h.m.ConfigHash) != 1 {
		t.Errorf("config_hash_info{hash=%s} = %v, %d series", got.Hash, v, testutil.CollectAndCount(h.m.ConfigHash))
	}
	wantStart := start.UTC().Format(time.RFC3339Nano)
	if got.Started != wantStart || got.Applied != wantStart || got.LastReload != nil {
		t.Errorf("started %s applied %s last_reload %+v; want %s and none", got.Started, got.Applied, got.LastReload, wantStart)
	}
	if v := testutil.ToFloat64(h.m.ConfigReloadSuccess); v != float64(start.UnixNano())/1e9 {
		t.Errorf("config_last_reload_success_timestamp_seconds = %v, want %v", v, float64(start.Unix()))
	}

	// A reload applied: a new hash, one series, the time; a secret rotated
	// alone would not change it.
	h.clock.Advance(time.Minute)
	next := h.cfg
	next.Cache.StaleIfError = 20 * time.Minute
	if err := h.p.Reload(next); err != nil {
		t.Fatal(err)
	}
	h.p.NoteReload(nil)
	reloaded, _ := get()
	at := h.clock.Now().UTC().Format(time.RFC3339Nano)
	if reloaded.Hash == got.Hash || reloaded.Applied != at || reloaded.Started != wantStart || reloaded.LastReload == nil || *reloaded.LastReload != (admin.ReloadOutcome{At: at, Result: "ok"}) {
		t.Errorf("after a reload: hash %s (was %s) applied %s last %+v", reloaded.Hash, got.Hash, reloaded.Applied, reloaded.LastReload)
	}
	if testutil.CollectAndCount(h.m.ConfigHash) != 1 || testutil.ToFloat64(h.m.ConfigHash.WithLabelValues(reloaded.Hash)) != 1 {
		t.Errorf("config_hash_info after a reload: %d series", testutil.CollectAndCount(h.m.ConfigHash))
	}
	if v := testutil.ToFloat64(h.m.ConfigReloadSuccess); v != float64(h.clock.Now().UnixNano())/1e9 {
		t.Errorf("config_last_reload_success_timestamp_seconds = %v after the reload", v)
	}
	rotated := next
	rotated.Shared.RedisPassword = "another-password-0123456789"
	if rotated.RedactedHash() != reloaded.Hash {
		t.Errorf("a rotated secret changed the hash")
	}

	// A reload refused: the outcome and why; the configuration, its hash
	// and time stay.
	h.clock.Advance(time.Minute)
	h.p.NoteReload(errors.New("restart to change listen"))
	refused, _ := get()
	if refused.Hash != reloaded.Hash || refused.Applied != reloaded.Applied || refused.LastReload == nil ||
		refused.LastReload.Result != "error" || refused.LastReload.Error != "restart to change listen" {
		t.Errorf("after a refused reload: %+v", refused)
	}
}
