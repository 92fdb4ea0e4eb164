package repo

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Every Redis key of the service is built here, from one prefix, and carries
// a {hash tag} naming its shard, so all keys one Lua script touches share a
// Redis Cluster slot:
//
//	combo:{N}:stream                      STREAM  windows waiting to close (the only key without a TTL)
//	combo:{N}:w:<a>:<u>:<len>:<type>      STRING  the combo key's newest unpublished window
//	combo:{N}:p:<stream id>               STRING  a window displaced (parked) by a newer one before its flush
//	combo:{N}:s:<bucket>:<id mod 8192>    SET     ids counted in one dedupe bucket (window.dedupe of time)
//	combo:{N}:probe                       (none)  never written: /readyz deletes it to see the node takes writes;
//	                                              the report script declares it (see report.lua)
//	combo:{0}:r:<consumer>                STRING  a replica's shard and window settings (ShareSettings), with a TTL
//	combo:{0}:replicas                    SET     the consumers of the replicas that share their settings
//	combo:{0}:i:<consumer>                STRING  the process last running as consumer (ClaimConsumer), with a TTL
//
// A stream entry names its window by the part of its key after ":w:"
// (EntryComboKey).
//
// Names are short on purpose: with one window and one marker per report,
// a few bytes of key name are a measurable share of memory per window.
//
// N is the shard, 0..shards-1, chosen from the combo key. The item type is
// written raw after its byte length: the length makes the key unambiguous
// whatever bytes the type holds (':', '{', '}', spaces, CJK), and the tag,
// being the first {...} in the key, is never changed by a '{' inside it.
const prefix = "combo:"

// Group is the consumer group every replica's worker joins.
const Group = "combo-workers"

// Keys builds the service's Redis keys for a fixed number of shards.
type Keys struct {
	shards int
	tags   []string // "combo:{N}:" per shard, built once
}

// NewKeys returns the key builder for shards shards (>= 1).
func NewKeys(shards int) Keys {
	if shards < 1 {
		shards = 1
	}
	k := Keys{shards: shards, tags: make([]string, shards)}
	for i := range k.tags {
		k.tags[i] = prefix + "{" + strconv.Itoa(i) + "}:"
	}
	return k
}

// Shards is the number of shards.
func (k Keys) Shards() int { return k.shards }

// Shard places a combo key: every report of one key lands on one shard, so
// its window's keys and its stream share a slot.
func (k Keys) Shard(activityID, userID int64, itemType string) int {
	if k.shards == 1 {
		return 0
	}
	h := fnv.New32a()
	var b [16]byte
	h.Write(strconv.AppendInt(b[:0], activityID, 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(b[:0], userID, 10))
	h.Write([]byte{0})
	h.Write([]byte(itemType))
	return int(h.Sum32() % uint32(k.shards))
}

// Stream is shard's stream of windows waiting to close.
func (k Keys) Stream(shard int) string { return k.tags[shard] + "stream" }

// Current is the key of the combo key's newest unpublished window.
func (k Keys) Current(shard int, activityID, userID int64, itemType string) string {
	b := make([]byte, 0, len(k.tags[shard])+48+len(itemType))
	b = append(b, k.tags[shard]...)
	b = append(b, windowPart...)
	return comboKeyPart(b, activityID, userID, itemType)
}

// windowPart follows the tag in every window key.
const windowPart = "w:"

// WindowPrefix is the prefix of shard's window keys (Current), for tools
// that look for the windows left open.
func (k Keys) WindowPrefix(shard int) string { return k.tags[shard] + windowPart }

// ParkedPrefix is the prefix the report script appends a stream id to when
// it parks a displaced window (the script knows the id, Go does not).
func (k Keys) ParkedPrefix(shard int) string { return k.tags[shard] + "p:" }

// Parked is the key of a displaced window, by its stream entry id.
func (k Keys) Parked(shard int, streamID string) string { return k.ParkedPrefix(shard) + streamID }

// WindowPatterns are KEYS/SCAN patterns that match every window key of
// every shard, current and parked: for inspection only (tests, an
// operator's redis-cli), since no request or flush path may use KEYS or
// SCAN. After every window is published or dropped, none matches.
func WindowPatterns() []string { return []string{prefix + "{*}:w:*", prefix + "{*}:p:*"} }

// Probe is a key of shard that is never written: deleting it changes
// nothing, and is refused by a node that takes no writes.
func (k Keys) Probe(shard int) string { return k.tags[shard] + "probe" }

// Replicas is the set naming every replica that shares its settings
// (ShareSettings), by its consumer name, on shard 0 as ReplicaSettings.
func (k Keys) Replicas() string { return k.tags[0] + "replicas" }

// ReplicaSettings is the key where the replica whose worker is consumer
// keeps its settings for the others to compare (ShareSettings), and so
// tells them it lives: they keep its consumer in every group however idle
// (PruneConsumers). It is on shard 0, which every replica has whatever
// its shard count.
func (k Keys) ReplicaSettings(consumer string) string { return k.tags[0] + "r:" + consumer }

// ConsumerInstance is the key naming the process that last claimed
// consumer (ClaimConsumer), on shard 0 as ReplicaSettings.
func (k Keys) ConsumerInstance(consumer string) string { return k.tags[0] + "i:" + consumer }

// SeenPrefix is the prefix of shard's dedupe sets (the report script
// appends the bucket number, from Redis's clock, and the id's sub-set).
func (k Keys) SeenPrefix(shard int) string { return k.tags[shard] + "s:" }

// EntryComboKey is what a stream entry stores of its window's key: the
// part of Current after ":w:" (the report script cuts it off the key).
func EntryComboKey(activityID, userID int64, itemType string) string {
	return comboKeyPart(nil, activityID, userID, itemType)
}

// ParseEntryComboKey reads back EntryComboKey.
func ParseEntryComboKey(s string) (activityID, userID int64, itemType string, err error) {
	fail := func() (int64, int64, string, error) {
		return 0, 0, "", fmt.Errorf("combo key %q: want <activity>:<user>:<len>:<item type>", s)
	}
	parts := strings.SplitN(s, ":", 4)
	if len(parts) != 4 {
		return fail()
	}
	a, err1 := strconv.ParseInt(parts[0], 10, 64)
	u, err2 := strconv.ParseInt(parts[1], 10, 64)
	n, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || n != len(parts[3]) {
		return fail()
	}
	return a, u, parts[3], nil
}

func comboKeyPart(b []byte, activityID, userID int64, itemType string) string {
	b = strconv.AppendInt(b, activityID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, userID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(len(itemType)), 10)
	b = append(b, ':')
	return string(append(b, itemType...))
}
