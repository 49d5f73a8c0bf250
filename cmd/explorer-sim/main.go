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
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o.cfg.Logger = logger
	s, err := sim.Listen(o.cfg, o.listen)
	if err != nil {
		return err
	}
	announce(s, o)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Info("stopping")
	return s.Close()
}

// options are what the command line asks for.
type options struct {
	listen  string
	chains  string     // as given, comma-separated
	verbose bool       // log at debug level
	cfg     sim.Config // all but its Logger
}

// faultDefaults are the fault flags' defaults: no fault.
var faultDefaults = sim.Faults{RetryAfter: 1, EnvelopeCode: "50026", OversizedBytes: 9 << 20, GzipBombBytes: 64 << 20}

// parseFlags reads the command line into options, or says what is wrong.
func parseFlags(args []string) (options, error) {
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
	profile := fs.String("profile", sim.DefaultProfile, "comma-separated profile and reading names, applied in order: the explorer's reading of each point its documentation leaves open ("+strings.Join(sim.ProfileNames(), ", ")+"; see sim/README.md)")
	verbose := fs.Bool("v", false, "log every auth rejection and fault change at debug level")
	var f sim.Faults
	faultFlags(fs, &f)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := f.Validate(); err != nil {
		return options{}, fmt.Errorf("fault flags: %w", err)
	}
	prof, err := sim.ParseProfile(*profile)
	if err != nil {
		return options{}, fmt.Errorf("-profile: %w", err)
	}
	var now func() time.Time
	if *frozen != "" {
		at, err := time.Parse(time.RFC3339, *frozen)
		if err != nil {
			return options{}, fmt.Errorf("-frozen-at: %w", err)
		}
		now = func() time.Time { return at }
	}
	if *pending == 0 {
		*pending = -1 // sim.Config: 0 means the default, negative means none
	}
	return options{listen: *listen, chains: *chains, verbose: *verbose, cfg: sim.Config{
		Auth:          *auth,
		Credentials:   signer.Credentials{APIKey: *apiKey, SecretKey: *secretKey, Passphrase: *passphrase},
		BlockInterval: *interval,
		PendingDepth:  *pending,
		Seed:          *seed,
		Chains:        strings.Split(*chains, ","),
		Faults:        f,
		Profile:       &prof,
		Now:           now,
	}}, nil
}

// faultFlags defines the -fault-* flags, which set f (faultDefaults).
func faultFlags(fs *flag.FlagSet, f *sim.Faults) {
	d := faultDefaults
	fs.StringVar(&f.Route, "fault-route", "", "route name the faults apply to (empty: all routes)")
	fs.DurationVar(&f.Latency, "fault-latency", 0, "latency added to every answer")
	fs.DurationVar(&f.Jitter, "fault-jitter", 0, "uniform random latency [0, jitter) added on top")
	fs.Float64Var(&f.HTTP500, "fault-500", 0, "fraction of answers that are HTTP 500")
	fs.Float64Var(&f.HTTP429, "fault-429", 0, "fraction of answers that are HTTP 429 with Retry-After")
	fs.IntVar(&f.RetryAfter, "fault-retry-after", d.RetryAfter, "Retry-After seconds of injected 429s")
	fs.Float64Var(&f.Envelope, "fault-envelope", 0, "fraction of answers that are a 200 error envelope")
	fs.StringVar(&f.EnvelopeCode, "fault-envelope-code", d.EnvelopeCode, "code of injected error envelopes")
	fs.BoolVar(&f.EnvelopeVendor, "fault-envelope-vendor", false, "answer injected error envelopes with the vendor's HTTP status and message for their code (else HTTP 200)")
	fs.Float64Var(&f.Hang, "fault-hang", 0, "fraction of requests never answered")
	fs.Float64Var(&f.Drop, "fault-drop", 0, "fraction of connections dropped without an answer")
	fs.Float64Var(&f.Malformed, "fault-malformed", 0, "fraction of answers whose body is not JSON")
	fs.Float64Var(&f.Truncated, "fault-truncated", 0, "fraction of answers cut in half")
	fs.Float64Var(&f.Oversized, "fault-oversized", 0, "fraction of answers padded to -fault-oversized-bytes")
	fs.IntVar(&f.OversizedBytes, "fault-oversized-bytes", d.OversizedBytes, "size of oversized answers")
	fs.Float64Var(&f.GzipBomb, "fault-gzip-bomb", 0, "fraction of answers that are a gzip body decoding to -fault-gzip-bomb-bytes")
	fs.IntVar(&f.GzipBombBytes, "fault-gzip-bomb-bytes", d.GzipBombBytes, "decoded size of gzip bombs")
}

// announce says where the simulator listens, with which account, and
// which faults it injects, if any.
func announce(s *sim.Server, o options) {
	fmt.Printf("explorer-sim listening on %s (chains %s, auth %v, profile %s)\n", s.URL(), o.chains, o.cfg.Auth, s.Profile())
	if creds := o.cfg.Credentials; creds == sim.DemoCredentials() {
		fmt.Printf("demo account (published, not a secret): api key %s, passphrase %s, secret key %s\n",
			creds.APIKey, creds.Passphrase, creds.SecretKey)
	} else {
		fmt.Printf("account: api key %s (secret key and passphrase as given)\n", creds.APIKey)
	}
	if o.cfg.Faults != faultDefaults {
		js, _ := json.Marshal(s.Faults())
		fmt.Printf("faults: %s\n", js)
	}
}
