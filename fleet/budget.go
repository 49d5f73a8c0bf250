package fleet

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/time/rate"
)

// gcra is the fleet's token bucket as a generic cell rate algorithm
// (ATM Forum TM 4.1; the algorithm of redis-cell and go-redis/redis_rate):
// one key holds the theoretical arrival time (TAT) of the next token, so a
// take is one atomic read-compare-write however many nodes share it. Time is
// Redis' own clock (TIME), so the nodes' clocks do not matter.
//
// KEYS[1] TAT in microseconds. ARGV: microseconds between tokens, burst,
// microseconds the caller may wait for a token it reserves now, tokens that
// must be left for the take (0 = any). Returns {granted, microseconds to
// wait before the call (denied: until a token is due), tokens left * 1000}.
// Numbers are formatted with %.0f: Lua's default %.14g would round a
// microsecond timestamp.
var gcra = rueidis.NewLuaScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1])) or now
if tat < now then tat = now end
local tokens = burst - (tat - now) / interval
local delay = tat + interval - burst * interval - now
local need = tonumber(ARGV[4])
if delay > tonumber(ARGV[3]) or (need > 0 and tokens < need) then
  return {0, math.max(delay, 0), math.floor(tokens * 1000)}
end
tat = tat + interval
redis.call("SET", KEYS[1], string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000) + 1)
return {1, math.max(delay, 0), math.floor((tokens - 1) * 1000)}
`)

var errReply = errors.New("budget script: unexpected reply")

// Budget is the upstream quota shared by the fleet (it implements
// proxy.Budget). While Redis is down, the node spends a local bucket of
// LocalShare of the rate and burst instead.
type Budget struct {
	r      *Redis
	key    string
	rate   atomic.Uint64 // float64 bits: tokens per second, whole fleet
	burst  atomic.Int64
	tokens atomic.Uint64 // float64 bits: tokens left after the last shared take
	local  *rate.Limiter
}

func newBudget(r *Redis) *Budget {
	b := &Budget{r: r, key: r.cfg.Prefix + "budget",
		local: rate.NewLimiter(rate.Limit(r.cfg.Rate*r.cfg.LocalShare), localBurst(r.cfg.Burst, r.cfg.LocalShare))}
	b.rate.Store(math.Float64bits(r.cfg.Rate))
	b.burst.Store(int64(r.cfg.Burst))
	b.tokens.Store(math.Float64bits(float64(r.cfg.Burst)))
	return b
}

func localBurst(burst int, share float64) int { return max(1, int(float64(burst)*share)) }

// Take draws a token from the fleet's bucket, reserving one due within wait
// and sleeping until it is due. Background callers take only while a
// quarter of the bucket is left, so client misses keep the rest.
func (b *Budget) Take(wait time.Duration, background bool) (bool, time.Duration) {
	c := b.r.live()
	if c == nil {
		return b.takeLocal(wait, background)
	}
	burst := b.burst.Load()
	need := 0.0
	if background {
		wait, need = 0, max(1, float64(burst)/4)
	}
	interval := 1e6 / math.Float64frombits(b.rate.Load())
	ctx, cancel := context.WithTimeout(context.Background(), b.r.cfg.Timeout)
	v, err := gcra.Exec(ctx, c, []string{b.key}, []string{
		strconv.FormatFloat(interval, 'f', 3, 64),
		strconv.FormatInt(burst, 10),
		strconv.FormatInt(wait.Microseconds(), 10),
		strconv.FormatFloat(need, 'f', 3, 64),
	}).AsIntSlice()
	cancel()
	if err == nil && len(v) != 3 {
		err = errReply
	}
	if err != nil {
		b.r.result(opRate, err)
		return b.takeLocal(wait, background)
	}
	b.tokens.Store(math.Float64bits(float64(v[2]) / 1000))
	delay := time.Duration(v[1]) * time.Microsecond
	if v[0] == 0 {
		b.r.requests[opRate][outMiss].Inc()
		if background {
			return false, max(delay, time.Second)
		}
		return false, delay
	}
	b.r.requests[opRate][outOK].Inc()
	if delay > 0 {
		time.Sleep(delay)
	}
	return true, 0
}

// takeLocal is the node's own bucket, with the rules of the proxy's
// single-node budget.
func (b *Budget) takeLocal(wait time.Duration, background bool) (bool, time.Duration) {
	now := time.Now()
	if background {
		if b.local.TokensAt(now) < max(1, float64(b.local.Burst())/4) {
			return false, time.Second
		}
		return b.local.AllowN(now, 1), 0
	}
	res := b.local.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second
	}
	d := res.DelayFrom(now)
	if d > wait {
		res.CancelAt(now)
		return false, d
	}
	if d > 0 {
		time.Sleep(d)
	}
	return true, 0
}

// Tokens is what the fleet's bucket held after this node's last take, or
// the local bucket while Redis is down.
func (b *Budget) Tokens() float64 {
	if b.r.live() == nil {
		return b.local.Tokens()
	}
	return math.Float64frombits(b.tokens.Load())
}

// SetRate changes the rate and burst this node asks the fleet's bucket for
// (after an upstream 429, or a reload) and its local share.
func (b *Budget) SetRate(perSecond float64, burst int) {
	b.rate.Store(math.Float64bits(perSecond))
	b.burst.Store(int64(burst))
	b.local.SetLimit(rate.Limit(perSecond * b.r.cfg.LocalShare))
	b.local.SetBurst(localBurst(burst, b.r.cfg.LocalShare))
}
