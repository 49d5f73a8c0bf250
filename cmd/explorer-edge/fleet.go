package main

import (
	"strings"

	"explorer-edge/config"
	"explorer-edge/fleet"
)

// fleetConfig takes the shared tier's settings from the configuration: the
// composition root adapts the one to the other, so fleet knows nothing of
// the configuration file.
func fleetConfig(c config.Config) fleet.Config {
	var addrs []string
	for _, a := range strings.Split(c.Shared.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	s := c.Shared
	return fleet.Config{
		Addrs: addrs, Username: s.RedisUsername, Password: s.RedisPassword, TLS: s.RedisTLS, Cluster: s.RedisCluster,
		Timeout: s.Timeout, LockTTL: s.LockTTL, LockWait: s.LockWait, Prefix: s.Prefix,
		Rate: c.Upstream.Rate, Burst: c.Upstream.Burst, LocalShare: s.LocalShare, MaxBody: c.Upstream.MaxResponseBytes,
	}
}
