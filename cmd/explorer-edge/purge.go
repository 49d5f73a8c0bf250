package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"explorer-edge/config"
)

// purgeUsage is the synopsis of the purge subcommand.
const purgeUsage = `usage: explorer-edge purge [-admin URL] [-token-file F] [-soft] SELECTOR
SELECTOR is one of:
  -url URI                 one request, as a client sends it
  -hash H -chain C         a hash's entries and every answer that asked for it
  -chain C -from A -to B   every answer holding a block or transaction at heights A..B
  -route R [-chain C]      a route's answers (on one chain)
  -all                     everything
The token is read from -token-file, else from EDGE_ADMIN__PURGE_TOKEN.
`

// purgeCmd is "explorer-edge purge ...": it posts one selector to an
// edge's POST /purge (docs/purge.md) and prints what was purged. Exit
// status 0 on success, 1 when the edge refused or could not be reached,
// 2 on a usage error.
func purgeCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, purgeUsage, "\nflags:\n"); fs.PrintDefaults() }
	var call adminCall
	call.flags(fs)
	asJSON := fs.Bool("json", false, "print the edge's JSON answer as it came")
	sel := purgeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	body, problem := sel.body(fs)
	if problem != "" {
		fmt.Fprintln(stderr, "explorer-edge purge:", problem)
		fmt.Fprint(stderr, purgeUsage)
		return 2
	}
	token, err := purgeToken(call.tokenFile)
	if err != nil {
		fmt.Fprintln(stderr, "explorer-edge purge:", err)
		return 1
	}
	status, answer, err := postPurge(strings.TrimRight(call.admin, "/")+"/purge", token, body, call.timeout)
	if err != nil {
		fmt.Fprintln(stderr, "explorer-edge purge:", err)
		return 1
	}
	if *asJSON {
		stdout.Write(answer)
		if !bytes.HasSuffix(answer, []byte("\n")) {
			fmt.Fprintln(stdout)
		}
	}
	return printPurged(stdout, stderr, status, answer, *asJSON)
}

// adminCall is the flags of the subcommands that ask an edge's admin port.
type adminCall struct {
	admin, tokenFile string
	timeout          time.Duration
}

func (c *adminCall) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.admin, "admin", "http://127.0.0.1:8081", "the edge's admin address (admin_listen), as http://host:port")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding admin.purge_token (default: $EDGE_ADMIN__PURGE_TOKEN)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the request")
}

// purgeSelector is the selector flags of purge: the JSON body of POST
// /purge, but for the heights.
type purgeSelector struct {
	URL      string `json:"url,omitempty"`
	Hash     string `json:"hash,omitempty"`
	Chain    string `json:"chain,omitempty"`
	Route    string `json:"route,omitempty"`
	All      bool   `json:"all,omitempty"`
	Soft     bool   `json:"soft,omitempty"`
	from, to int64
}

func purgeFlags(fs *flag.FlagSet) *purgeSelector {
	s := &purgeSelector{}
	fs.StringVar(&s.URL, "url", "", "purge one request URI")
	fs.StringVar(&s.Hash, "hash", "", "purge by hash (with -chain)")
	fs.StringVar(&s.Chain, "chain", "", "the chain of -hash, -from/-to or -route")
	fs.Int64Var(&s.from, "from", -1, "lowest height to purge (with -chain and -to)")
	fs.Int64Var(&s.to, "to", -1, "highest height to purge (with -chain and -from)")
	fs.StringVar(&s.Route, "route", "", "purge a route's answers, e.g. block-list")
	fs.BoolVar(&s.All, "all", false, "purge everything")
	fs.BoolVar(&s.Soft, "soft", false, "mark stale (served while one refresh runs) instead of deleting")
	return s
}

// body is the request of the flags fs parsed, or the usage problem.
func (s *purgeSelector) body(fs *flag.FlagSet) (body map[string]any, problem string) {
	if fs.NArg() > 0 {
		return nil, "unexpected argument " + fs.Arg(0)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	heights := set["from"] || set["to"]
	n := 0
	for _, on := range []bool{set["url"], set["hash"], heights, set["route"], set["all"]} {
		if on {
			n++
		}
	}
	switch {
	case n == 0:
		return nil, "give one selector"
	case n > 1:
		return nil, "give one selector, not several"
	case heights && !(set["from"] && set["to"] && set["chain"]):
		return nil, "heights need -chain, -from and -to"
	case set["hash"] && !set["chain"]:
		return nil, "-hash needs -chain"
	case (set["url"] || set["all"]) && set["chain"]:
		return nil, "-chain goes with -hash, -from/-to or -route"
	}
	body = map[string]any{}
	b, _ := json.Marshal(s)
	json.Unmarshal(b, &body)
	if heights {
		delete(body, "chain")
		body["heights"] = map[string]any{"chain": s.Chain, "from": s.from, "to": s.to}
	}
	return body, ""
}

// printPurged says what the edge's answer says was purged, or why it
// refused; it returns the exit status.
func printPurged(stdout, stderr io.Writer, status int, answer []byte, asJSON bool) int {
	var env struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
		Data []struct {
			Selector string `json:"selector"`
			Mode     string `json:"mode"`
			Memory   int    `json:"memory"`
			Redis    int    `json:"redis"`
			Fleet    bool   `json:"fleet"`
		} `json:"data"`
	}
	if err := json.Unmarshal(answer, &env); err != nil || status != http.StatusOK || env.Code != "0" || len(env.Data) != 1 {
		msg := env.Msg
		if msg == "" {
			msg = strings.TrimSpace(string(answer))
		}
		fmt.Fprintf(stderr, "explorer-edge purge: refused: HTTP %d: %s\n", status, msg)
		return 1
	}
	if !asJSON {
		d := env.Data[0]
		fmt.Fprintf(stdout, "purged (%s, by %s): %d entries in memory, %d in Redis", d.Mode, d.Selector, d.Memory, d.Redis)
		if d.Fleet {
			fmt.Fprint(stdout, "; sent to the fleet")
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

// purgeToken reads the token from file (a regular file of at most 64 KiB,
// as every secret's file), or from the environment.
func purgeToken(file string) (string, error) {
	if file == "" {
		if t := strings.TrimSpace(os.Getenv("EDGE_ADMIN__PURGE_TOKEN")); t != "" {
			return t, nil
		}
		return "", errors.New("no token: give -token-file or set EDGE_ADMIN__PURGE_TOKEN")
	}
	t, err := config.ReadSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("-token-file: %w", err)
	}
	return t, nil
}

// postPurge sends the request and returns the edge's status and body.
func postPurge(url, token string, body any, timeout time.Duration) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, answer, err
}
