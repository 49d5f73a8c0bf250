// Command explorer-sim is the reference upstream of explorer-edge: a
// deterministic synthetic chain explorer speaking the six read operations,
// with SVC-ACCESS signature checks, request counting (/sim/stats) and fault
// injection (/sim/faults). See sim/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"explorer-edge/signer"
	"explorer-edge/sim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "explorer-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("explorer-sim", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8900", "address to listen on")
	auth := fs.Bool("auth", true, "verify SVC-ACCESS-* signatures")
	apiKey := fs.String("api-key", sim.DemoAPIKey, "accepted SVC-ACCESS-KEY")
	secretKey := fs.String("secret-key", sim.DemoSecretKey, "secret key of the accepted client")
	passphrase := fs.String("passphrase", sim.DemoPassphrase, "accepted SVC-ACCESS-PASSPHRASE")
	interval := fs.Duration("block-interval", time.Second, "time between blocks")
	pending := fs.Int("pending-depth", 2, "newest blocks still pending (0 for none)")
	seed := fs.Int64("seed", 0, "seed of all synthetic content")
	chains := fs.String("chains", strings.Join(sim.DefaultChains(), ","), "comma-separated chainShortName values served")
	frozen := fs.String("frozen-at", "", "RFC 3339 time the chain's clock stands still at (empty: the chain follows real time)")
	verbose := fs.Bool("v", false, "log every auth rejection and fault change at debug level")

	var f sim.Faults
	fs.StringVar(&f.Route, "fault-route", "", "route name the faults apply to (empty: all routes)")
	fs.DurationVar(&f.Latency, "fault-latency", 0, "latency added to every answer")
	fs.DurationVar(&f.Jitter, "fault-jitter", 0, "uniform random latency [0, jitter) added on top")
	fs.Float64Var(&f.HTTP500, "fault-500", 0, "fraction of answers that are HTTP 500")
	fs.Float64Var(&f.HTTP429, "fault-429", 0, "fraction of answers that are HTTP 429 with Retry-After")
	fs.IntVar(&f.RetryAfter, "fault-retry-after", 1, "Retry-After seconds of injected 429s")
	fs.Float64Var(&f.Envelope, "fault-envelope", 0, "fraction of answers that are a 200 error envelope")
	fs.StringVar(&f.EnvelopeCode, "fault-envelope-code", "50026", "code of injected error envelopes")
	fs.Float64Var(&f.Hang, "fault-hang", 0, "fraction of requests never answered")
	fs.Float64Var(&f.Drop, "fault-drop", 0, "fraction of connections dropped without an answer")
	fs.Float64Var(&f.Malformed, "fault-malformed", 0, "fraction of answers whose body is not JSON")
	fs.Float64Var(&f.Truncated, "fault-truncated", 0, "fraction of answers cut in half")
	fs.Float64Var(&f.Oversized, "fault-oversized", 0, "fraction of answers padded to -fault-oversized-bytes")
	fs.IntVar(&f.OversizedBytes, "fault-oversized-bytes", 9<<20, "size of oversized answers")
	fs.Float64Var(&f.GzipBomb, "fault-gzip-bomb", 0, "fraction of answers that are a gzip body decoding to -fault-gzip-bomb-bytes")
	fs.IntVar(&f.GzipBombBytes, "fault-gzip-bomb-bytes", 64<<20, "decoded size of gzip bombs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("fault flags: %w", err)
	}
	var now func() time.Time
	if *frozen != "" {
		at, err := time.Parse(time.RFC3339, *frozen)
		if err != nil {
			return fmt.Errorf("-frozen-at: %w", err)
		}
		now = func() time.Time { return at }
	}
	if *pending == 0 {
		*pending = -1 // sim.Config: 0 means the default, negative means none
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	creds := signer.Credentials{APIKey: *apiKey, SecretKey: *secretKey, Passphrase: *passphrase}
	s, err := sim.Listen(sim.Config{
		Auth:          *auth,
		Credentials:   creds,
		BlockInterval: *interval,
		PendingDepth:  *pending,
		Seed:          *seed,
		Chains:        strings.Split(*chains, ","),
		Faults:        f,
		Now:           now,
		Logger:        logger,
	}, *listen)
	if err != nil {
		return err
	}
	fmt.Printf("explorer-sim listening on %s (chains %s, auth %v)\n", s.URL(), *chains, *auth)
	if creds == sim.DemoCredentials() {
		fmt.Printf("demo account (published, not a secret): api key %s, passphrase %s, secret key %s\n",
			creds.APIKey, creds.Passphrase, creds.SecretKey)
	} else {
		fmt.Printf("account: api key %s (secret key and passphrase as given)\n", creds.APIKey)
	}
	if f != (sim.Faults{RetryAfter: 1, EnvelopeCode: "50026", OversizedBytes: 9 << 20, GzipBombBytes: 64 << 20}) {
		js, _ := json.Marshal(s.Faults())
		fmt.Printf("faults: %s\n", js)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Info("stopping")
	return s.Close()
}
