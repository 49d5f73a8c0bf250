package fleet

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"explorer-edge/quota"
)

// gcra is the fleet's token bucket as a generic cell rate algorithm
// (ATM Forum TM 4.1; the algorithm of redis-cell and go-redis/redis_rate):
// one key holds the theoretical arrival time (TAT) of the next token, so a
// take is one atomic read-compare-write however many nodes share it. Time is
// Redis' own clock (TIME), so the nodes' clocks do not matter.
//
// KEYS[1] TAT in microseconds. ARGV: microseconds between tokens, burst,
// microseconds the caller may wait for a token it reserves now, tokens that
// must be left for the take (0 = any), tokens this node spent on its own
// while Redis was away (its debt: charged first, at most a burst). Returns
// {granted, microseconds to wait before the call (denied: until a token is
// due), tokens left * 1000, 1 if the stored TAT was out of bounds and
// reset}. A TAT more than two bursts ahead (debt included) cannot come from
// takes: it was written by someone else (SET edge:budget 99999999999) and
// is reset rather than obeyed. Numbers are formatted with %.0f: Lua's
// default %.14g would round a microsecond timestamp.
var gcra = rueidis.NewLuaScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local stored = redis.pcall("GET", KEYS[1])
local reset = 0
if type(stored) == "table" and stored.err then
  redis.call("DEL", KEYS[1]) -- another type of value (a hash, a list): not ours
  stored = false
  reset = 1
end
local tat = tonumber(stored) or now
if tat ~= tat or tat > now + 2 * burst * interval + 1000000 then
  tat = now
  reset = 1
end
if tat < now then tat = now end
local debt = math.min(tonumber(ARGV[5]), burst)
if debt > 0 then
  tat = math.min(tat + debt * interval, now + 2 * burst * interval)
  redis.call("SET", KEYS[1], string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000) + 1)
end
local tokens = burst - (tat - now) / interval
local delay = tat + interval - burst * interval - now
local need = tonumber(ARGV[4])
if delay > tonumber(ARGV[3]) or (need > 0 and tokens < need) then
  return {0, math.max(delay, 0), math.floor(tokens * 1000), reset}
end
tat = tat + interval
redis.call("SET", KEYS[1], string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000) + 1)
return {1, math.max(delay, 0), math.floor((tokens - 1) * 1000), reset}
`)

var errReply = errors.New("budget script: unexpected reply")

// Budget is the upstream quota shared by the fleet (it implements
// proxy.Budget). While Redis is down, the node spends a local bucket of
// LocalShare of the rate and burst instead.
//
// How Redis coming and going is kept from multiplying the quota: the local
// bucket is drained in step with the node's shared takes, so an outage
// starts with what the node's share refilled, not a fresh local burst; and
// what the node spent alone is its debt, charged to the shared bucket at
// its first take after Redis answers again (at most a burst at a time), so
// the shared bucket does not also hand out the tokens that filled it while
// no node could take from it. Over any span the fleet spends at most rate x
// span + burst + the debt of the last outage, not yet charged: the nodes'
// local shares times that outage (TestFleetBudgetHoldsWhileRedisFlaps).
type Budget struct {
	r      *Redis
	key    string
	rate   atomic.Uint64 // float64 bits: tokens per second, whole fleet
	burst  atomic.Int64
	tokens atomic.Uint64 // float64 bits: tokens left after the last shared take
	local  *quota.Bucket
	debt   atomic.Int64 // tokens taken locally and not yet charged to the shared bucket
}

func newBudget(r *Redis, key string, rate float64, burst int) *Budget {
	b := &Budget{r: r, key: r.cfg.Prefix + key,
		local: quota.New(rate*r.cfg.LocalShare, localBurst(burst, r.cfg.LocalShare))}
	b.rate.Store(math.Float64bits(rate))
	b.burst.Store(int64(burst))
	b.tokens.Store(math.Float64bits(float64(burst)))
	return b
}

// AccountBudget is the fleet-wide budget of the upstream account name
// (upstream.accounts), under its own key: budget:<name>. The default
// account's is Budget, under the key budget, as before there were
// accounts.
func (r *Redis) AccountBudget(name string, rate float64, burst int) *Budget {
	return newBudget(r, "budget:"+name, rate, burst)
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
	// The debt is taken off before the script runs: a script that timed
	// out here may still run in Redis (a paused Redis runs what it queued),
	// and charging the same debt twice would starve the fleet. Only a
	// failure that did not reach Redis gives it back.
	debt := min(b.debt.Load(), burst)
	b.debt.Add(-debt)
	ctx, cancel := context.WithTimeout(context.Background(), b.r.cfg.Timeout)
	v, err := gcra.Exec(ctx, c, []string{b.key}, []string{
		strconv.FormatFloat(interval, 'f', 3, 64),
		strconv.FormatInt(burst, 10),
		strconv.FormatInt(wait.Microseconds(), 10),
		strconv.FormatFloat(need, 'f', 3, 64),
		strconv.FormatInt(debt, 10),
	}).AsIntSlice()
	cancel()
	if err == nil && len(v) != 4 {
		err = errReply
	}
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
			b.debt.Add(debt)
		}
		b.r.result(opRate, err)
		return b.takeLocal(wait, background)
	}
	if v[3] == 1 {
		b.r.rejected("budget")
		b.r.log.Warn("shared budget key held an impossible value; reset", "key", b.key)
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
	// The local bucket spends in step, so that an outage finds it holding
	// only what the node's share refilled meanwhile.
	b.local.Spend()
	if delay > 0 {
		time.Sleep(delay)
	}
	return true, 0
}

// takeLocal is the node's own bucket (package quota, the single node's
// rules); what it grants is the node's debt to the shared bucket.
func (b *Budget) takeLocal(wait time.Duration, background bool) (bool, time.Duration) {
	ok, retry := b.local.Take(wait, background)
	if ok {
		b.debt.Add(1)
	}
	return ok, retry
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
	b.local.SetRate(perSecond*b.r.cfg.LocalShare, localBurst(burst, b.r.cfg.LocalShare))
}
