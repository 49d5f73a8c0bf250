package main

import (
	"fmt"

	"explorer-edge/config"
)

// reservedDescriptors are the descriptors the process needs beside its
// connections: standard streams, the two listeners, the poller, Redis
// connections in fleet mode, the config watcher, DNS lookups, with room
// to spare.
const reservedDescriptors = 64

// fitDescriptors lowers server.max_conns so that every connection the
// edge may hold at once fits in nofile descriptors: max_conns public
// connections, admin_max_conns admin ones, upstream.max_conns to the
// upstream, and reservedDescriptors. Past the limit accept fails with
// EMFILE, and so does everything else that needs a descriptor (an
// upstream call, a Redis reconnect). It returns the configured value when
// it lowered it (0: unchanged), and an error when not even one public
// connection fits. nofile 0 means unknown: nothing is checked.
func fitDescriptors(cfg *config.Config, nofile uint64) (lowered int, err error) {
	if nofile == 0 {
		return 0, nil
	}
	others := uint64(cfg.AdminMaxConns) + uint64(cfg.Upstream.MaxConns) + reservedDescriptors
	if uint64(cfg.Server.MaxConns)+others <= nofile {
		return 0, nil
	}
	if others >= nofile {
		return 0, fmt.Errorf("descriptor limit %d cannot hold admin_max_conns (%d) + upstream.max_conns (%d) + %d for the process itself "+
			"and any public connection; raise it (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=)",
			nofile, cfg.AdminMaxConns, cfg.Upstream.MaxConns, reservedDescriptors)
	}
	lowered = cfg.Server.MaxConns
	cfg.Server.MaxConns = int(nofile - others)
	return lowered, nil
}
