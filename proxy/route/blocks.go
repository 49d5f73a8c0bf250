package route

import (
	"explorer-edge/proxy/truth"
	"strconv"

	"github.com/buger/jsonparser"
)

// Blocks reads the blocks an answer of route r shows: every row of a
// block list (a row without a state, or an empty one, is Stateless); the
// block of a transaction list (its rows' blockHash). nil for other
// routes.
func Blocks(r ID, height int64, body []byte) []truth.Block {
	var out []truth.Block
	switch r {
	case BlockList:
		jsonparser.ArrayEach(body, func(row []byte, _ jsonparser.ValueType, _ int, _ error) {
			s, _ := jsonparser.GetString(row, "height")
			h, err := strconv.ParseInt(s, 10, 64)
			if err != nil || h < 0 {
				return
			}
			hash, _ := jsonparser.GetString(row, "hash")
			state, _ := jsonparser.GetString(row, "state")
			out = append(out, truth.Block{Height: h, Hash: hash, Done: state == "done", Stateless: state == ""})
		}, "data", "[0]", "blockList")
	case TransactionList:
		if height < 0 {
			return nil
		}
		jsonparser.ArrayEach(body, func(row []byte, _ jsonparser.ValueType, _ int, _ error) {
			if len(out) > 0 {
				return
			}
			if hash, err := jsonparser.GetString(row, "blockHash"); err == nil && hash != "" {
				out = append(out, truth.Block{Height: height, Hash: hash})
			}
		}, "data", "[0]", "blockList")
	}
	return out
}
