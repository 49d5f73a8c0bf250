package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The soak's edge runs as a fleet of two nodes sharing one redis-server
// (started for the run on a free port, no persistence), so the shared tier,
// the fleet's budget and its locks are under the load and the faults too;
// some phases pause or stop Redis (redisFault).

// redisServer is the soak's redis-server child.
type redisServer struct {
	proc *child
	addr string

	pauses, stops atomic.Int64 // CLIENT PAUSEs that Redis acknowledged; SIGSTOPs sent
	pauseErrs     atomic.Int64
}

// startRedis starts redis-server on a free loopback port and waits until
// it answers PING; a port taken in between is tried again, three times.
func startRedis(ctx context.Context, bin, dir string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("fleet mode needs redis-server (-redis, or -fleet=false): %w", err)
	}
	for range 3 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		c, err := startChild("redis-server", path,
			[]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"},
			filepath.Join(dir, "redis-server.log"))
		if err != nil {
			return nil, err
		}
		r := &redisServer{proc: c, addr: addr}
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		for c.alive() && time.Now().Before(deadline) && ctx.Err() == nil {
			if reply, err := redisCommand(addr, "PING"); err == nil && reply == "+PONG" {
				tick.Stop()
				return r, nil
			}
			<-tick.C
		}
		tick.Stop()
		exited := !c.alive()
		c.kill()
		if !exited {
			return nil, fmt.Errorf("redis-server on %s does not answer PING (output in %s)", addr, c.logPath)
		}
	}
	return nil, fmt.Errorf("redis-server exited at start three times (output in %s)", filepath.Join(dir, "redis-server.log"))
}

// redisCommand sends one inline command and returns the first line of the
// reply, without its CRLF.
func redisCommand(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// redisFault is what a phase does to Redis.
type redisFault struct {
	every time.Duration // 0: nothing
	pause time.Duration // CLIENT PAUSE <pause> ALL every `every`
	stop  time.Duration // or SIGSTOP, SIGCONT after `stop`, every `every`
}

func (f redisFault) String() string {
	switch {
	case f.pause > 0:
		return fmt.Sprintf("redis paused %v every %v", f.pause, f.every)
	case f.stop > 0:
		return fmt.Sprintf("redis stopped %v every %v", f.stop, f.every)
	}
	return ""
}

// disturb applies f from now until ctx ends: the first pause or stop at
// once (a short phase gets one too), then one every f.every. A stopped
// Redis is always continued before it returns.
func (r *redisServer) disturb(ctx context.Context, f redisFault) {
	if r == nil || f.every <= 0 {
		return
	}
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	for {
		switch {
		case f.pause > 0:
			reply, err := redisCommand(r.addr, fmt.Sprintf("CLIENT PAUSE %d ALL", f.pause.Milliseconds()))
			if err == nil && reply == "+OK" {
				r.pauses.Add(1)
			} else {
				r.pauseErrs.Add(1)
			}
		case f.stop > 0 && r.proc.alive():
			pid := r.proc.cmd.Process.Pid
			if syscall.Kill(pid, syscall.SIGSTOP) == nil {
				r.stops.Add(1)
				t := time.NewTimer(f.stop)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// phaseWork runs what a phase does beside the sim's faults (Redis pauses,
// the stale hot keys' hammer) and stops it when the next phase starts.
type phaseWork struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startWork starts ph's work under ctx; stop ends it and waits for it.
func startWork(ctx context.Context, ph phase, rs *redisServer, hm *hammer) *phaseWork {
	ctx, cancel := context.WithCancel(ctx)
	w := &phaseWork{cancel: cancel}
	if ph.redis.every > 0 {
		w.wg.Go(func() { rs.disturb(ctx, ph.redis) })
	}
	if ph.hammer && hm != nil {
		w.wg.Go(func() { hm.run(ctx) })
	}
	return w
}

func (w *phaseWork) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
}
