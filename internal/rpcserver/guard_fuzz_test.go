package rpcserver

import (
	"runtime"
	"strings"
	"testing"

	"github.com/cloudwego/gopkg/protocol/thrift"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/validate"
)

// decodeAllocBound is what decoding n accepted bytes may allocate: the
// most a wire byte can cost is an empty struct in a list (one byte on the
// wire, a value and a pointer in memory, under 160 bytes), plus a little
// for the decoder's own few allocations.
func decodeAllocBound(n int) uint64 { return 160*uint64(n) + 64<<10 }

// argsOf are the arguments structs Kitex decodes a request into, by the
// method it names; it decodes nothing for a method it does not have.
func argsOf() map[string]thrift.FastCodec {
	return map[string]thrift.FastCodec{
		"ReportContribution":  &combo.ComboServiceReportContributionArgs{},
		"ReportContributions": &combo.ComboServiceReportContributionsArgs{},
		"MergeLatest":         &combo.ComboServiceMergeLatestArgs{},
	}
}

// FuzzCheckRequest: CheckRequest never panics, and whatever it accepts
// decodes with the generated code, as the arguments of the method it
// names, without panic and allocating in proportion to its size.
func FuzzCheckRequest(f *testing.F) {
	full := batch(3)
	full.Req.Contributions[1].AvatarUrl = strings.Repeat("u", 40)
	seeds := [][]byte{
		request("ReportContributions", full),
		request("ReportContribution", &combo.ComboServiceReportContributionArgs{Req: &combo.ReportContributionRequest{Contribution: full.Req.Contributions[0]}}),
		request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: &combo.MergeLatestRequest{ActivityId: 7, Limit: 3,
			Records: []*combo.ContributionRecord{{Id: 1, UserId: 2, ItemType: "rose", Nickname: "小明", Quantity: 2, ComboCount: 2, CreatedAt: 1732950000000}}}}),
		listRequest("ReportContributions", 1, 3, 3),
		listRequest("ReportContributions", 1, 5, 2),
		listRequest("MergeLatest", 2, 1<<31-1, 0),
		repeatedList(2, 3),
		repeatedStruct(3),
		append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1), byte(thrift.STOP)),
		append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.SET), 0, 9, byte(thrift.I32), 0, 0, 0, 1, 0, 0, 0, 7, 0, 0),
		withExtraField(extraFields()["13: map<i32,list<i8>>"]),
		withExtraField(extraFields()["13: list<struct>"]),
		{},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckRequest(b) != nil {
			return
		}
		name, _, _, l, err := thrift.Binary.ReadMessageBegin(b)
		if err != nil {
			t.Fatalf("accepted a request whose header does not read: %v", err)
		}
		args, ok := argsOf()[name]
		if !ok {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		args.FastRead(b[l:]) // an error is fine; a panic or a huge allocation is not
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, decodeAllocBound(len(b)); got > limit {
			t.Fatalf("accepted %d bytes that, read as %s's arguments, allocated %d bytes (limit %d)", len(b), name, got, limit)
		}
	})
}

// FuzzCheckRequestAcceptsValid: every request within the contract's
// limits, built and encoded by the generated code, passes the guard.
func FuzzCheckRequestAcceptsValid(f *testing.F) {
	f.Add(uint16(1), uint16(4), uint16(6), uint16(0), "rose", "小明{:}\x1f")
	f.Add(uint16(1000), uint16(64), uint16(256), uint16(2048), "{0}:w:", "")
	f.Add(uint16(10000), uint16(64), uint16(256), uint16(2048), strings.Repeat("礼", 21), "\x00")
	f.Add(uint16(0), uint16(1), uint16(0), uint16(0), "", "")
	f.Fuzz(func(t *testing.T, n, typeLen, nameLen, urlLen uint16, typeSeed, textSeed string) {
		// Strings at lengths up to their bounds, of the fuzzer's bytes.
		str := func(seed string, n uint16, max int) string {
			k := int(n) % (max + 1)
			if seed == "" {
				seed = "x"
			}
			return strings.Repeat(seed, k/len(seed)+1)[:k]
		}
		itemType := str(typeSeed, typeLen, validate.MaxItemType)
		name, url := str(textSeed, nameLen, validate.MaxName), str(textSeed, urlLen, validate.MaxURL)
		c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, StarId: 1, ItemId: 3, ItemType: itemType, ItemName: name,
			ItemIcon: url, Nickname: name, AvatarUrl: url, Quantity: validate.MaxQuantity, CreatedAt: validate.MaxCreatedAt}
		r := &combo.ContributionRecord{Id: 1, UserId: 42, Nickname: name, AvatarUrl: url, StarId: 1, ItemId: 3, ItemType: itemType,
			ItemName: name, ItemIcon: url, Quantity: validate.MaxQuantity, ComboCount: 1 << 30, CreatedAt: validate.MaxCreatedAt}

		batchLen := int(n) % (validate.MaxBatch + 1)
		cs := make([]*combo.Contribution, batchLen)
		for i := range cs {
			cs[i] = c
		}
		rs := make([]*combo.ContributionRecord, int(n)%(validate.MaxMergeRecords+1))
		for i := range rs {
			rs[i] = r
		}
		reqs := map[string][]byte{
			"ReportContribution":  request("ReportContribution", &combo.ComboServiceReportContributionArgs{Req: &combo.ReportContributionRequest{Contribution: c}}),
			"ReportContributions": request("ReportContributions", &combo.ComboServiceReportContributionsArgs{Req: &combo.ReportContributionsRequest{Contributions: cs}}),
			"MergeLatest":         request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: &combo.MergeLatestRequest{ActivityId: 7, Records: rs, Limit: -1}}),
		}
		for method, b := range reqs {
			if err := CheckRequest(b); err != nil {
				t.Fatalf("%s of %d bytes (%d items, strings of %d/%d/%d bytes) refused: %v", method, len(b), len(rs), len(itemType), len(name), len(url), err)
			}
		}
	})
}
