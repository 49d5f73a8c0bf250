package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"explorer-edge/config"
	"explorer-edge/proxy/doctor"
)

// doctorUsage is the synopsis of the doctor subcommand.
const doctorUsage = `usage: explorer-edge doctor [-config FILE] [-json] [-chain C] [-token ADDR] [-cross-hash H [-cross-chain C]]
Asks the configured upstream, with the configuration's credentials and at
most 10 signed calls within upstream.rate, which reading it has of each
point the explorer's documentation leaves open (block-list height, block
state, no-data answers, cross-chain ids and updateTime, position-list
limit), its clock skew and whether its 429 carries Retry-After; prints
what the edge will do and what to set (docs/doctor.md). Exit status 0
when the edge can serve, 1 when a finding makes it unsafe, 2 on a usage
or configuration error.
`

// doctorCmd is "explorer-edge doctor ...".
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage, "\nflags:\n"); fs.PrintDefaults() }
	path := fs.String("config", "config.yaml", "configuration file (YAML); EDGE_* environment variables override it")
	asJSON := fs.Bool("json", false, "print the findings as JSON (upstream, chain, calls, findings[] of point, reading, evidence, advice, severity, unsafe)")
	chain := fs.String("chain", "", "the chain asked (chainShortName); default the first of chains")
	token := fs.String("token", "", "a token contract address for position-list limit=100; default one from a recent token transfer")
	crossHash := fs.String("cross-hash", "", "a cross-chain transfer's hash (TZ side) to check the records' id and updateTime; default not checked")
	crossChain := fs.String("cross-chain", "", "the chain of -cross-hash; default TRADE_ZONE when served, else -chain")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "explorer-edge doctor: unexpected argument %q\n%s", fs.Arg(0), doctorUsage)
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintf(stderr, "explorer-edge doctor: %s: %v\n", *path, err)
		return 2
	}
	for _, w := range config.Warnings(&cfg) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	if *chain != "" && !served(cfg.Chains, *chain) {
		fmt.Fprintf(stderr, "explorer-edge doctor: -chain %q is not one of chains (%s)\n", *chain, strings.Join(cfg.Chains, ", "))
		return 2
	}
	if *crossChain != "" && !served(cfg.Chains, *crossChain) {
		fmt.Fprintf(stderr, "explorer-edge doctor: -cross-chain %q is not one of chains (%s)\n", *crossChain, strings.Join(cfg.Chains, ", "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := doctor.Run(ctx, doctor.Options{Config: &cfg, Chain: *chain, Token: *token, CrossHash: *crossHash, CrossChain: *crossChain})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // the questions asked keep their &
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "explorer-edge doctor:", err)
		return 1
	}
	if rep.Unsafe {
		return 1
	}
	return 0
}

// served reports whether chain is one of chains, as the edge matches them
// (case-insensitively).
func served(chains []string, chain string) bool {
	for _, c := range chains {
		if strings.EqualFold(c, chain) {
			return true
		}
	}
	return false
}
