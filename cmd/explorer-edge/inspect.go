package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// inspectUsage is the synopsis of the inspect subcommand.
const inspectUsage = `usage: explorer-edge inspect [-admin URL] [-token-file F] (-url URI | -top N | -config)
  -url URI     what the edge holds for one request, as a client sends it (GET /cache)
  -top N       the N most-asked keys of the last minutes (GET /cache/top)
  -config      the configuration in force (secrets redacted, api keys by prefix), its hash and last reload (GET /config)
The token (admin.purge_token) is read from -token-file, else from
EDGE_ADMIN__PURGE_TOKEN. The edge's JSON answer is printed indented.
`

// inspectCmd is "explorer-edge inspect ...": it asks an edge's admin port
// what it holds (docs/operations.md, The admin port) and prints the JSON
// answer. Exit status 0 on success, 1 when the edge refused or could not
// be reached, 2 on a usage error.
func inspectCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, inspectUsage, "\nflags:\n"); fs.PrintDefaults() }
	var call adminCall
	call.flags(fs)
	uri := fs.String("url", "", "the request URI to look up, e.g. /api/v5/chainx/block/block-list?chainShortName=chainx")
	top := fs.Int("top", 0, "list the N most-asked keys (1 to 256)")
	showConfig := fs.Bool("config", false, "show the configuration in force")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	path, problem := inspectPath(fs, *uri, *top, *showConfig)
	if problem != "" {
		fmt.Fprintln(stderr, "explorer-edge inspect:", problem)
		fmt.Fprint(stderr, inspectUsage)
		return 2
	}
	token, err := purgeToken(call.tokenFile)
	if err != nil {
		fmt.Fprintln(stderr, "explorer-edge inspect:", err)
		return 1
	}
	status, answer, err := getAdmin(strings.TrimRight(call.admin, "/")+path, token, call.timeout)
	if err != nil {
		fmt.Fprintln(stderr, "explorer-edge inspect:", err)
		return 1
	}
	return printInspected(stdout, stderr, status, answer)
}

// inspectPath is the admin path the flags fs parsed ask, or the usage
// problem.
func inspectPath(fs *flag.FlagSet, uri string, top int, showConfig bool) (path, problem string) {
	if fs.NArg() > 0 {
		return "", "unexpected argument " + fs.Arg(0)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	n := 0
	if set["url"] {
		n++
		path = "/cache?url=" + url.QueryEscape(uri)
	}
	if set["top"] {
		n++
		path = "/cache/top?n=" + strconv.Itoa(top)
	}
	if set["config"] && showConfig {
		n++
		path = "/config"
	}
	switch {
	case n == 0:
		return "", "give -url, -top or -config"
	case n > 1:
		return "", "give one of -url, -top and -config"
	}
	return path, ""
}

// printInspected prints the edge's answer indented, or why it refused; it
// returns the exit status.
func printInspected(stdout, stderr io.Writer, status int, answer []byte) int {
	var env struct {
		Code string `json:"code"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(answer, &env); err != nil || status != http.StatusOK || env.Code != "0" {
		msg := env.Msg
		if msg == "" {
			msg = strings.TrimSpace(string(answer))
		}
		fmt.Fprintf(stderr, "explorer-edge inspect: refused: HTTP %d: %s\n", status, msg)
		return 1
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, answer, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(answer)
	}
	if !bytes.HasSuffix(pretty.Bytes(), []byte("\n")) {
		pretty.WriteByte('\n')
	}
	stdout.Write(pretty.Bytes())
	return 0
}

// getAdmin sends GET url with the token and returns the edge's status and
// body.
func getAdmin(url, token string, timeout time.Duration) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, answer, err
}
