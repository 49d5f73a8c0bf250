package server

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
	"explorer-edge/proxy/envelope"
	"explorer-edge/proxy/logsample"
	"explorer-edge/tcpio"
)

// New is the public fasthttp server with the hardening of
// server.*: timeouts that cut off slow clients, bounded headers and
// connections, no request bodies (every route is a GET), and requests it
// cannot read answered with envelopes. Serve it on Guard(ln,
// PublicListener(cfg)): its write buffer is sized for tcpio.Conn, or
// fasthttp's default with server.plain_conns.
//
// h answers requests; unreadable answers those fasthttp could not read
// (see UnreadableError); log takes fasthttp's lines (ConnLogger).
func New(cfg config.Server, h fasthttp.RequestHandler, unreadable func(*fasthttp.RequestCtx, error), log fasthttp.Logger) *fasthttp.Server {
	writeBuffer := tcpio.WriteChunk // the body bypasses it: tcpio.Conn
	if cfg.PlainConns {
		writeBuffer = 0 // fasthttp's default
	}
	return &fasthttp.Server{
		Handler:            h,
		Name:               "explorer-edge",
		ReadTimeout:        cfg.ReadTimeout,
		WriteTimeout:       cfg.WriteTimeout,
		IdleTimeout:        cfg.IdleTimeout,
		ErrorHandler:       unreadable,
		ReadBufferSize:     cfg.MaxHeaderBytes, // bounds request line + headers
		WriteBufferSize:    writeBuffer,
		MaxRequestBodySize: MaxBodyBytes,
		// The listener caps connections (Listener, server.max_conns) and
		// refuses with an envelope; fasthttp's own cap, which answers in
		// plain text, is a backstop above it: a closed connection frees
		// the listener's slot a moment before fasthttp's worker.
		Concurrency:       cfg.MaxConns + concurrencySlack,
		ReduceMemoryUsage: false,
		// fasthttp normalizes the case of header names as it reads them,
		// so a client's "svc-access-key" is found as SVC-ACCESS-KEY.
		DisableHeaderNamesNormalizing: false,
		NoDefaultContentType:          true,
		CloseOnShutdown:               true,
		TCPKeepalive:                  true,
		// A hijacked connection (an event stream, proxy/stream) is its
		// handler's alone: the server neither closes it nor keeps the
		// request's buffers for it (stream.Options.KeptConns).
		KeepHijackedConns: true,
		// fasthttp would quote the request's raw headers (credentials
		// included) in its parse errors; connLogger redacts what remains.
		SecureErrorLogMessage: true,
		Logger:                log,
	}
}

// NewAdmin is the admin port's fasthttp server (AdminHandler), with
// the public server's logging: fasthttp's lines go through connLogger
// (JSON, sampled, a client's malformed request at debug level only) and
// its parse errors do not quote the request, which on this port may carry
// the purge token. A request it cannot read gets an envelope. Serve it on
// Guard(ln, AdminListener(cfg), ...).
func NewAdmin(cfg config.Config, h fasthttp.RequestHandler, unreadable func(*fasthttp.RequestCtx, error), log fasthttp.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:        h,
		Name:           "explorer-edge-admin",
		ReadTimeout:    10 * time.Second,
		WriteTimeout:   30 * time.Second,
		ErrorHandler:   unreadable,
		ReadBufferSize: adminHeaderBytes,
		// The listener caps connections (AdminListener); see NewServer.
		Concurrency:           AdminListener(cfg).MaxConns + HealthReserve + concurrencySlack,
		SecureErrorLogMessage: true,
		Logger:                log,
	}
}

// adminHeaderBytes bounds an admin request's line and headers (fasthttp's
// default read buffer).
const adminHeaderBytes = 4096

// ErrAdminHeadersTooLarge is the 431 of the admin port.
var ErrAdminHeadersTooLarge = &envelope.Error{Status: 431, Code: "50036", Msg: "Request line and headers larger than " + strconv.Itoa(adminHeaderBytes) + " bytes"}

// ConnLogger takes fasthttp's log lines. Those about one client breaking
// the protocol (a body too large, a malformed request line, a timeout) are
// the client's doing and go to the debug level; anything else (max_conns
// reached, accept failing) is the operator's business and goes to warn,
// sampled per format (a client can repeat them at will, a connection
// each). Debug lines, asked for while diagnosing, all go out.
type ConnLogger struct {
	Log *slog.Logger
	// Sample says whether a WARN line of a key may go out, and how many
	// were left out before it.
	Sample func(logsample.Key) (ok bool, suppressed int64)
}

func (l ConnLogger) Printf(format string, args ...any) {
	log := l.Log
	if strings.HasPrefix(format, "error when serving connection") {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("fasthttp", "detail", redactHeaders(fmt.Sprintf(format, args...)))
		}
		return
	}
	ok, suppressed := l.Sample(logsample.Key{Msg: "fasthttp", Code: format})
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("detail", redactHeaders(fmt.Sprintf(format, args...)))}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "fasthttp", attrs...)
}

var (
	// A header value fasthttp refused, quoted as Go does (%q).
	quotedHeaderValue = regexp.MustCompile(`invalid header value "(?:[^"\\]|\\.)*"`)
	// A credential header and its value, up to the end of its line in a
	// quoted request (an escaped CR or LF) or of the quoted text.
	credentialHeader = regexp.MustCompile(`(?i)(svc-access-[a-z-]*|authorization|proxy-authorization|cookie|set-cookie|x-api-key)(\s*:\s*)(?:[^"\\]|\\[^rn])*`)
)

// redactHeaders takes the credentials out of a line of fasthttp's: the
// SVC-ACCESS-* values (key, passphrase, timestamp and a signature that
// could be replayed within auth.max_skew), Authorization and Cookie, and any
// header value it quotes as invalid, since it does not say whose it is.
func redactHeaders(line string) string {
	line = quotedHeaderValue.ReplaceAllLiteralString(line, "invalid header value (withheld)")
	return credentialHeader.ReplaceAllString(line, "${1}${2}(withheld)")
}
