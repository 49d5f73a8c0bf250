package cache

// Source says where an entry's answer came from: what the admin port's
// GET /cache reports. It is set where the entry is made and never read on
// the request path.
type Source uint8

const (
	SourceUnknown   Source = iota // made elsewhere (tests, an older build's shared entry before it is checked)
	SourceUpstream                // fetched from the explorer API by this node
	SourceShared                  // read from the fleet's shared tier (Redis), fetched by some node
	SourceAssembled               // a per-hash route's answer put together from its hashes' entries
	SourceBlocks                  // a block-list page put together from the blocks held (proxy/blocks)
)

// String names the source: "unknown", "upstream", "shared", "assembled",
// "blocks".
func (s Source) String() string {
	switch s {
	case SourceUpstream:
		return "upstream"
	case SourceShared:
		return "shared"
	case SourceAssembled:
		return "assembled"
	case SourceBlocks:
		return "blocks"
	}
	return "unknown"
}
