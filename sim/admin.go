package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxListed bounds the n of /sim/hashes and of the hash-list methods.
const maxListed = 10_000

// adminHandler serves the control endpoints under /sim/. They need no auth
// and are not counted in stats.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, r *http.Request) {
		writeValue(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("POST /sim/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		s.ResetStats()
		writeValue(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /sim/faults", func(w http.ResponseWriter, r *http.Request) {
		writeValue(w, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("POST /sim/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err == nil {
			err = json.Unmarshal(body, &f)
		}
		if err == nil {
			err = f.Validate()
		}
		if err != nil {
			writeValue(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.SetFaults(f)
		writeValue(w, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("DELETE /sim/faults", func(w http.ResponseWriter, r *http.Request) {
		s.ClearFaults()
		writeValue(w, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("GET /sim/profile", func(w http.ResponseWriter, r *http.Request) {
		writeValue(w, http.StatusOK, s.profileView())
	})
	mux.HandleFunc("POST /sim/profile", func(w http.ResponseWriter, r *http.Request) {
		p, err := readProfile(r)
		if err != nil {
			writeValue(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.SetProfile(p)
		writeValue(w, http.StatusOK, s.profileView())
	})
	mux.HandleFunc("DELETE /sim/profile", func(w http.ResponseWriter, r *http.Request) {
		s.SetProfile(MustProfile(DefaultProfile))
		writeValue(w, http.StatusOK, s.profileView())
	})
	mux.HandleFunc("GET /sim/hashes", s.serveHashes)
	return mux
}

// serveHashes answers /sim/hashes?chainShortName=X&kind=K&n=N with
// {"hashes":[...]}. Kinds: cross (cross-chain hashes that exist), tx
// (transaction hashes of done blocks, newest first; with height, that
// block's), internal (transaction hashes with internal transactions),
// token (token contracts), unknown (well-formed hashes that never exist).
func (s *Server) serveHashes(w http.ResponseWriter, r *http.Request) {
	p := params{r.URL.Query()}
	c, err := s.chainParam(p)
	if err == nil && p.get("kind") == "" {
		err = missing("kind")
	}
	var n, height int64
	if err == nil {
		n, err = p.int("n", 10, 1, maxListed)
	}
	if err == nil {
		height, err = p.int("height", -1, 0, 1<<47)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var out []string
	switch kind := strings.ToLower(p.get("kind")); kind {
	case "cross":
		out = s.CrossHashes(c.short, int(n))
	case "tx":
		if height >= 0 {
			out = s.TxHashes(c.short, height)
		} else {
			out = s.doneTxHashes(c, int(n))
		}
	case "internal":
		out = s.InternalTxHashes(c.short, int(n))
	case "token":
		out = s.TokenContracts(c.short)
	case "unknown":
		for i := range int(n) {
			out = append(out, s.UnknownHash(i))
		}
	default:
		writeError(w, invalid("kind", "%q is not one of cross, tx, internal, token, unknown", kind))
		return
	}
	if out == nil {
		out = []string{}
	}
	writeValue(w, http.StatusOK, map[string][]string{"hashes": out})
}

func writeValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, envelope(codeServer, err.Error())
	}
	writeJSON(w, status, append(b, '\n'))
}

// Head returns the current head height of chain, or -1 for a chain not served.
func (s *Server) Head(chain string) int64 {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil {
		return -1
	}
	return c.head(s.cfg.Now(), s.cfg.BlockInterval)
}

// CrossHashes returns the first n cross-chain hashes of chain that exist
// (lower case). They do not depend on chain time. Every seventh, starting
// with the fourth, is a BatchWithdraw answered by two records.
func (s *Server) CrossHashes(chain string, n int) []string {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil {
		return nil
	}
	n = min(n, crossCount)
	out := make([]string, 0, max(n, 0))
	for k := range n {
		out = append(out, c.crossHash(uint64(k)))
	}
	return out
}

// TxHashes returns the transaction hashes of the block at height, or nil if
// the block does not exist yet.
func (s *Server) TxHashes(chain string, height int64) []string {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil || height < 0 || height > c.head(s.cfg.Now(), s.cfg.BlockInterval) {
		return nil
	}
	b := c.body(height)
	out := make([]string, b.txnCount)
	for i := range out {
		out[i] = c.txHash(height, i)
	}
	return out
}

// doneTxHashes lists n transaction hashes of done blocks, newest first.
func (s *Server) doneTxHashes(c *chain, n int) []string {
	var out []string
	for h := s.finalized(c); h >= 0 && len(out) < n; h-- {
		b := c.body(h)
		for i := 0; i < b.txnCount && len(out) < n; i++ {
			out = append(out, c.txHash(h, i))
		}
	}
	return out
}

// InternalTxHashes returns n transaction hashes of done blocks that have
// internal transactions, newest first.
func (s *Server) InternalTxHashes(chain string, n int) []string {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil {
		return nil
	}
	n = min(n, maxListed)
	var out []string
	for h := s.finalized(c); h >= 0 && len(out) < n; h-- {
		b := c.body(h)
		for i := 0; i < b.txnCount && len(out) < n; i++ {
			if c.hasInternals(h, i, b) {
				out = append(out, c.txHash(h, i))
			}
		}
	}
	return out
}

// finalized is the highest done height of c.
func (s *Server) finalized(c *chain) int64 {
	return c.head(s.cfg.Now(), s.cfg.BlockInterval) - int64(s.cfg.PendingDepth)
}

// TokenContracts returns the token contract addresses of chain (lower case):
// three ERC20, one ERC721, one ERC1155, each with more than 25000 holders.
func (s *Server) TokenContracts(chain string) []string {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil {
		return nil
	}
	out := make([]string, len(c.tokens))
	for i, t := range c.tokens {
		out[i] = t.address
	}
	return out
}

// UnknownHash returns a well-formed hash (0x + 64 lower-case hex) that is
// no transaction, block or cross-chain hash of any chain.
func (s *Server) UnknownHash(i int) string {
	return sealed(mix(uint64(s.cfg.Seed)), kindUnknown, uint64(i), 32)
}

// FinalizedHeight is the highest height whose block is done.
func (s *Server) FinalizedHeight(chain string) int64 {
	c := s.chains[strings.ToUpper(chain)]
	if c == nil {
		return -1
	}
	return s.finalized(c)
}

// profileJSON is what /sim/profile answers.
type profileJSON struct {
	Profile string   `json:"profile"` // the reading of every point (Profile.String)
	Default string   `json:"default"` // DefaultProfile
	Since   string   `json:"since"`   // chain time the profile was set (RFC 3339)
	Names   []string `json:"names"`   // every name ParseProfile accepts
}

func (s *Server) profileView() profileJSON {
	ps := s.profileNow()
	return profileJSON{ps.Profile.String(), DefaultProfile, ps.since.UTC().Format(time.RFC3339Nano), ProfileNames()}
}

// readProfile reads the body of POST /sim/profile, {"profile":"<names>"}.
func readProfile(r *http.Request) (Profile, error) {
	var req struct {
		Profile *string `json:"profile"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err == nil && req.Profile == nil {
		err = errors.New("missing")
	}
	if err != nil {
		return Profile{}, fmt.Errorf(`profile: %w; the body is {"profile":"<names, comma-separated>"}`, err)
	}
	p, err := ParseProfile(*req.Profile)
	if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	return p, nil
}
