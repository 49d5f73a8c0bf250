package proxy

import (
	"explorer-edge/cdn"
	"explorer-edge/config"
	"explorer-edge/proxy/purge"
)

// startCDN starts the CDN's purge sender (cdn.provider, docs/cdn.md):
// every purge this node applies, its own and (fleet mode) the fleet's,
// is queued as the tags that name it at the CDN; fleet mode sends from
// one node at a time, once every live node has applied it.
func (p *Proxy) startCDN(cfg config.Config, f purge.Fleet) error {
	if cfg.CDN.Provider == "" {
		return nil
	}
	o := cdn.Options{Metrics: p.metrics, Logger: p.log, Clock: p.clock}
	if cf, ok := f.(cdn.Fleet); ok {
		o.Fleet = cf
	}
	sender, err := cdn.New(cfg.CDN, o)
	if err != nil {
		return err
	}
	p.cdn = sender
	span := cfg.CDN.HeadSpan
	head := func(chain string) int64 {
		h, _, _ := p.truth.Head(chain)
		return h
	}
	p.purges.OnApplied(func(sel *purge.Selector, at, seq int64) {
		s := p.settings.Load()
		if s.cdn == nil {
			return
		}
		sender.Enqueue(cdn.Purge{Seq: seq, At: at, Tags: s.cdn.Tags.SelectorTags(sel, head, span), Soft: sel.Mode() == "soft"})
	})
	return nil
}

// closeCDN stops the sender: what it holds is the fleet's log's (another
// node sends it) or, on a single node, lost with the process.
func (p *Proxy) closeCDN() {
	if p.cdn != nil {
		p.cdn.Close()
	}
}
