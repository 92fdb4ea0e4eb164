// combo-service: merges repeated gifts of one user into one feed item per
// time window. The wire contract is CONTRACT.md (section 1) at the repository root: field ids
// and names here are normative and no field is optional.
namespace go combo

// Contribution is one activity_contributions row, reported after its DB write.
struct Contribution {
    1: i64 id            // DB row id (> 0), also the idempotency key
    2: i64 activity_id   // > 0
    3: i64 user_id       // > 0
    4: i64 star_id       // >= 0
    5: i64 item_id       // > 0
    6: string item_type  // 1..64 bytes, UTF-8, no control characters
    7: string item_name  // <= 256 bytes
    8: string item_icon  // <= 2048 bytes
    9: string nickname   // <= 256 bytes
    10: string avatar_url // <= 2048 bytes
    11: i32 quantity     // 1..1000000
    12: i64 created_at   // unix milliseconds (>= 1000000000000)
}

// ContributionRecord is one feed item; its names are the pushed JSON record's.
struct ContributionRecord {
    1: i64 id
    2: i64 user_id
    3: string nickname
    4: string avatar_url
    5: i64 star_id
    6: i64 item_id
    7: string item_type
    8: string item_name
    9: string item_icon
    10: i32 quantity
    11: i32 combo_count
    12: i64 created_at
}

// ComboError codes: 1 = INVALID_ARGUMENT, 2 = UNAVAILABLE, 3 = INTERNAL.
exception ComboError {
    1: i32 code
    2: string message // names the field and why, e.g. contributions[3].created_at: ...
}

struct ReportContributionRequest {
    1: Contribution contribution
}

struct ReportContributionResponse {
    1: i64 window_id        // id the window's merged record carries so far
    2: i32 window_quantity  // the window's total after this report
    3: bool duplicate       // this id was already counted; nothing changed
    4: bool degraded        // aggregation failed; published alone at once
}

struct ReportContributionsRequest {
    1: list<Contribution> contributions // 1..1000 items, validated whole
}

struct ReportContributionsResponse {
    1: list<ReportContributionResponse> results // same order as the request
}

struct MergeLatestRequest {
    1: i64 activity_id
    2: list<ContributionRecord> records // <= 10000 rows, any order
    3: i32 limit                        // <= 0 means all
}

struct MergeLatestResponse {
    1: list<ContributionRecord> records // merged, newest first
}

service ComboService {
    ReportContributionResponse ReportContribution(1: ReportContributionRequest req) throws (1: ComboError err)
    ReportContributionsResponse ReportContributions(1: ReportContributionsRequest req) throws (1: ComboError err)
    MergeLatestResponse MergeLatest(1: MergeLatestRequest req) throws (1: ComboError err)
}
