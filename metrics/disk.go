package metrics

import "github.com/prometheus/client_golang/prometheus"

// DiskStats are the disk tier's counters at a scrape (cache/disk's
// Stats, which the composition root hands over).
type DiskStats struct {
	Hits, Misses, Writes, Drops, WriteErrors int64
	Evictions, Expired, Corrupt, Deleted     int64
	Bytes, Entries                           int64
	// Resident is the file's pages in the process's memory map (Linux),
	// counted in process_resident_memory_bytes but page cache.
	Resident int64
	// Open: the tier is in use (cache/disk opened its file, and has not
	// found it corrupt since).
	Open bool
}

// diskFamily is one explorer_edge_disk_* family read from DiskStats.
type diskFamily struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*DiskStats) int64
}

func diskFamilies() []diskFamily {
	counter := func(name, help string, v func(*DiskStats) int64) diskFamily {
		return diskFamily{prometheus.NewDesc(ns+"_disk_"+name, help, nil, nil), prometheus.CounterValue, v}
	}
	gauge := func(name, help string, v func(*DiskStats) int64) diskFamily {
		return diskFamily{prometheus.NewDesc(ns+"_disk_"+name, help, nil, nil), prometheus.GaugeValue, v}
	}
	return []diskFamily{
		counter("hits_total", "Lookups the disk tier answered (a final answer, usable, not purged), each then kept in memory.", func(s *DiskStats) int64 { return s.Hits }),
		counter("misses_total", "Lookups of the disk tier that found nothing usable: absent, past its lifetime, corrupt, or the store stopped.", func(s *DiskStats) int64 { return s.Misses }),
		counter("writes_total", "Final answers written to the disk tier.", func(s *DiskStats) int64 { return s.Writes }),
		counter("drops_total", "Final answers not written to the disk tier: its queue was full, the answer larger than disk_max_bytes, or writes stopped after a failure.", func(s *DiskStats) int64 { return s.Drops }),
		counter("write_errors_total", "Commits of the disk tier that failed (disk full, read-only, I/O); writes stop for a minute after each, reads go on.", func(s *DiskStats) int64 { return s.WriteErrors }),
		counter("evictions_total", "Entries of the disk tier removed, oldest first, to stay within cache.disk_max_bytes.", func(s *DiskStats) int64 { return s.Evictions }),
		counter("expired_total", "Entries of the disk tier removed past their lifetime.", func(s *DiskStats) int64 { return s.Expired }),
		counter("corrupt_total", "Records of the disk tier that failed their checksum or did not parse: each a miss, removed.", func(s *DiskStats) int64 { return s.Corrupt }),
		counter("deleted_total", "Entries of the disk tier removed by purges and reorganizations.", func(s *DiskStats) int64 { return s.Deleted }),
		gauge("bytes", "What the disk tier's entries take in its file (bounded by cache.disk_max_bytes; the file is up to 1.35x it).", func(s *DiskStats) int64 { return s.Bytes }),
		gauge("entries", "Entries in the disk tier.", func(s *DiskStats) int64 { return s.Entries }),
		gauge("open", "1 while the disk tier is in use; 0 when disk.db could not be opened at start (the node serves without it: the log and /readyz say why) or was found corrupt since (off until restart).", func(s *DiskStats) int64 {
			if s.Open {
				return 1
			}
			return 0
		}),
		gauge("resident_bytes", "Bytes of the disk tier's file in the process's memory map (bbolt reads through it): counted in process_resident_memory_bytes, but page cache the kernel takes back before an OOM kill; ExplorerEdgeMemoryNearBound leaves them out. Linux only (0 elsewhere).", func(s *DiskStats) int64 { return s.Resident }),
	}
}

// diskCollector reads the disk tier's counters once per scrape.
type diskCollector struct {
	families []diskFamily
	stats    func() DiskStats
}

func (c diskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.families {
		ch <- f.desc
	}
}

func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, f := range c.families {
		ch <- prometheus.MustNewConstMetric(f.desc, f.typ, float64(f.value(&s)))
	}
}

// Disk registers the disk tier's families (cache.disk_path set; absent
// otherwise): the counters and gauges read from stats at scrape time,
// disk_max_bytes, and the read latency histogram, whose Observe it
// returns for the store's hook (disk.Metrics.ReadSeconds). Call it once.
func (m *Metrics) Disk(maxBytes int64, stats func() DiskStats) (observeRead func(seconds float64)) {
	// A read is a lookup in bbolt's memory map and a copy: 2-10 us from
	// the page cache, up to milliseconds from a cold disk.
	read := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "disk_read_seconds",
		Help:    "Time of each lookup of the disk tier, hit or miss (the record read, checked and decoded).",
		Buckets: []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}})
	bound := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "disk_max_bytes",
		Help: "Configured bound on the disk tier's bytes (cache.disk_max_bytes)."})
	bound.Set(float64(maxBytes))
	m.Registry.MustRegister(diskCollector{families: diskFamilies(), stats: stats}, read, bound)
	return read.Observe
}
