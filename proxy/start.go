package proxy

import (
	"explorer-edge/config"
	"explorer-edge/proxy/node"
	"explorer-edge/proxy/upstream"
)

// Start starts an edge for cfg through the composition root (package node)
// with this request core: Build, unless o.Core says otherwise.
func Start(cfg config.Config, o node.Options) (*node.Node, error) {
	if o.Core == nil {
		o.Core = Build
	}
	return node.Start(cfg, o)
}

// Build is the request core of what node.Start built (node.Options.Core).
func Build(cfg config.Config, parts node.Parts) (node.Core, error) {
	return New(cfg, OptionsOf(parts))
}

// OptionsOf are New's collaborators from node.Start's parts: the disk
// tier, when cache.disk_path is set; in fleet mode the shared tier is the
// cache tier below it, the fleet's purge log and the
// fleet-wide budget of every account.
func OptionsOf(parts node.Parts) Options {
	o := Options{Cache: parts.Cache, Metrics: parts.Metrics, Logger: parts.Logger, Now: parts.Now, Tracer: parts.Tracer, Disk: parts.Disk, DiskOff: parts.DiskOff}
	if shared := parts.Shared; shared != nil {
		o.Tier, o.Fleet, o.Budget, o.Relay = shared, shared, shared.Budget(), shared
		o.AccountBudget = func(name string, rate float64, burst int) upstream.Budget {
			return shared.AccountBudget(name, rate, burst)
		}
	}
	return o
}
