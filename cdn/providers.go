package cdn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"explorer-edge/config"
)

// provider is one CDN's purge API.
type provider interface {
	// maxTags is the provider's limit of tags per request.
	maxTags() int
	// send purges tags; a refusal for rate is a *retryAfter.
	send(ctx context.Context, tags []string, soft bool) error
}

func newProvider(cfg config.CDN, c *http.Client) (provider, error) {
	switch cfg.Provider {
	case "varnish":
		return &varnish{c: c, caches: cfg.Endpoints}, nil
	case "fastly":
		return &fastly{c: c, base: endpoint(cfg, "https://api.fastly.com"), service: cfg.Service, token: cfg.APIToken}, nil
	case "cloudflare":
		return &cloudflare{c: c, base: endpoint(cfg, "https://api.cloudflare.com/client/v4"), zone: cfg.Service, token: cfg.APIToken}, nil
	case "webhook":
		return &webhook{c: c, url: cfg.Endpoints[0], token: cfg.APIToken}, nil
	}
	return nil, fmt.Errorf("cdn.provider: %q is not one of %s", cfg.Provider, strings.Join(config.CDNProviders, ", "))
}

func endpoint(cfg config.CDN, def string) string {
	if len(cfg.Endpoints) > 0 {
		return strings.TrimRight(cfg.Endpoints[0], "/")
	}
	return def
}

// do sends req and reads the provider's verdict: 2xx acknowledged, 429
// (or a 503 with Retry-After) a refusal for rate, else a statusError with
// the start of the body (never the request: it holds the token).
func do(c *http.Client, req *http.Request) error {
	res, err := c.Do(req)
	if err != nil {
		// The URL is the operator's; a *url.Error quotes it, never a header.
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return nil
	case res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "":
		return &retryAfter{status: res.StatusCode, d: retryAfterOf(res.Header.Get("Retry-After"), time.Now())}
	}
	return &statusError{status: res.StatusCode, body: strings.TrimSpace(string(body))}
}

// retryAfterOf reads Retry-After (seconds or an HTTP date), at least a
// second, at most 10 minutes: a provider's word, bounded.
func retryAfterOf(v string, now time.Time) time.Duration {
	d := time.Second
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, time.Second), 10*time.Minute)
}

// varnish: PURGE to each cache with xkey-purge (or xkey-softpurge) naming
// the tags, space-separated (deploy/varnish/explorer-edge.vcl). Each cache
// must acknowledge: a cache that did not purge would serve the answer.
type varnish struct {
	c      *http.Client
	caches []string
}

func (v *varnish) maxTags() int { return 100 }

func (v *varnish) send(ctx context.Context, tags []string, soft bool) error {
	header := "xkey-purge"
	if soft {
		header = "xkey-softpurge"
	}
	for _, u := range v.caches {
		req, err := http.NewRequestWithContext(ctx, "PURGE", u, nil)
		if err != nil {
			return err
		}
		req.Header.Set(header, strings.Join(tags, " "))
		if err := do(v.c, req); err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
	}
	return nil
}

// fastly: POST /service/<id>/purge with the keys in Surrogate-Key (at most
// 256), Fastly-Soft-Purge for soft.
type fastly struct {
	c                    *http.Client
	base, service, token string
}

func (f *fastly) maxTags() int { return 256 }

func (f *fastly) send(ctx context.Context, tags []string, soft bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/service/"+f.service+"/purge", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Fastly-Key", f.token)
	req.Header.Set("Surrogate-Key", strings.Join(tags, " "))
	if soft {
		req.Header.Set("Fastly-Soft-Purge", "1")
	}
	return do(f.c, req)
}

// cloudflare: POST /zones/<zone>/purge_cache {"tags": [...]} (at most 100),
// hard only; its answer says success in the body too.
type cloudflare struct {
	c                 *http.Client
	base, zone, token string
}

func (cf *cloudflare) maxTags() int { return 100 }

func (cf *cloudflare) send(ctx context.Context, tags []string, _ bool) error {
	body, _ := json.Marshal(map[string][]string{"tags": tags})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cf.base+"/zones/"+cf.zone+"/purge_cache", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cf.token)
	req.Header.Set("Content-Type", "application/json")
	return do(cf.c, req)
}

// webhook: POST {"tags": [...], "soft": bool} to the operator's URL, with
// the token as a bearer token when set.
type webhook struct {
	c          *http.Client
	url, token string
}

func (w *webhook) maxTags() int { return 100 }

func (w *webhook) send(ctx context.Context, tags []string, soft bool) error {
	body, _ := json.Marshal(struct {
		Tags []string `json:"tags"`
		Soft bool     `json:"soft"`
	}{tags, soft})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(w.c, req)
}
