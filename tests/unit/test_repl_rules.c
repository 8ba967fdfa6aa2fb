/*
 * test_repl_rules.c: pv1's pure rules, driven without sockets or clocks:
 * config validation, who may stand, vote granting (set, term, config, log
 * up to date, one vote per term, dry runs), the majority commit point
 * (current term only, never back), w:N counting (term first), priority
 * takeover freshness; the sync source's choice and when to leave it;
 * arbiters, the write majority and the implicit default write concern; tags
 * and custom modes; each member's place for its periodic checkpoints.
 */
#include "check.h"
#include "repl/repl_int.h"

#include <string.h>

static sbl_rs_config_t three(double p2, bool hidden2, int votes2)
{
    sbl_rs_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.set_name, sizeof(cfg.set_name), "rs0");
    cfg.version = 1;
    cfg.n = 3;
    for (int i = 0; i < 3; i++) {
        cfg.m[i].id = i;
        snprintf(cfg.m[i].host, sizeof(cfg.m[i].host), "127.0.0.1:%d", 27017 + i);
        cfg.m[i].priority = 1;
        cfg.m[i].votes = 1;
    }
    cfg.m[2].priority = p2;
    cfg.m[2].hidden = hidden2;
    cfg.m[2].votes = votes2;
    return cfg;
}

static sbl_optime_t ot(int64_t t, uint32_t secs)
{
    sbl_optime_t o = {.t = t, .ts = SBL_TS(secs, 1)};
    return o;
}

/* sbl_rs_config_parse's result for a config written as JSON. */
static int parse_json(const char *json, sbl_rs_config_t *cfg)
{
    bson_error_t je;
    sbl_err_t err;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &je);
    CHECK(b != NULL);
    if (b == NULL)
        return -1;
    sbl_err_clear(&err);
    int rc = sbl_rs_config_parse(b, cfg, &err);
    bson_destroy(b);
    return rc;
}

static void test_config(void)
{
    sbl_rs_config_t cfg;
    sbl_err_t err;
    bson_t *d = BCON_NEW("_id", "rs0", "members", "[",
                         "{", "_id", BCON_INT32(0), "host", "127.0.0.1:1", "}",
                         "{", "_id", BCON_INT32(1), "host", "127.0.0.1:2", "priority",
                         BCON_DOUBLE(0), "hidden", BCON_BOOL(true), "}", "]",
                         "settings", "{", "electionTimeoutMillis", BCON_INT32(2000), "}");
    sbl_err_clear(&err);
    CHECK(sbl_rs_config_parse(d, &cfg, &err) == 0);
    CHECK(cfg.n == 2 && cfg.m[1].hidden && cfg.election_timeout_ms == 2000);
    CHECK(sbl_rs_electable(&cfg, 0) && !sbl_rs_electable(&cfg, 1));
    CHECK(sbl_rs_voters(&cfg) == 2 && sbl_rs_majority(&cfg) == 2);
    CHECK(cfg.m[0].build_indexes && cfg.m[1].build_indexes);
    bson_destroy(d);
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},{\"_id\":1,"
                     "\"host\":\"a:2\",\"priority\":0,\"buildIndexes\":false}]}", &cfg) == 0);
    CHECK(cfg.m[0].build_indexes && !cfg.m[1].build_indexes);
    /* hidden needs priority 0; same _id twice; votes 0 needs priority 0;
     * so does buildIndexes: false */
    const char *bad[] = {
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},"
        "{\"_id\":1,\"host\":\"a:2\",\"buildIndexes\":false}]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\",\"hidden\":true}]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},{\"_id\":0,\"host\":\"a:2\"}]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\",\"votes\":0}]}",
        "{\"_id\":\"rs0\",\"members\":[]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\",\"priority\":0}]}",
        "{\"members\":[{\"_id\":0,\"host\":\"a:1\"}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(parse_json(bad[i], &cfg) == SBL_E_InvalidReplicaSetConfig);
}

static void test_votes(void)
{
    char why[512];
    sbl_vote_state_t st = {.term = 3, .last_vote_term = 2, .last_vote_candidate = 0,
                           .last_applied = ot(3, 100), .cfg_version = 1, .cfg_term = 1,
                           .set_name = "rs0"};
    sbl_vote_req_t rq = {.set_name = "rs0", .term = 4, .candidate = 1, .cfg_version = 1,
                         .cfg_term = 1, .last_applied = ot(3, 100)};
    /* a dry run does not record a vote nor move the term */
    rq.dry_run = true;
    CHECK(sbl_rs_vote(&st, &rq, why, sizeof(why)));
    CHECK(st.term == 3 && st.last_vote_term == 2);
    /* the real vote: granted once per term */
    rq.dry_run = false;
    CHECK(sbl_rs_vote(&st, &rq, why, sizeof(why)));
    CHECK(st.term == 4 && st.last_vote_term == 4 && st.last_vote_candidate == 1);
    rq.candidate = 0;
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
    CHECK(strstr(why, "already voted") != NULL);
    /* a lower term */
    rq.term = 3;
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
    CHECK(strstr(why, "term") != NULL);
    /* a staler log: older term wins over a newer ts */
    rq.term = 5;
    rq.last_applied = ot(2, 500);
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
    CHECK(strstr(why, "staler") != NULL);
    rq.last_applied = ot(3, 99);
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
    rq.last_applied = ot(3, 101);
    CHECK(sbl_rs_vote(&st, &rq, why, sizeof(why)));
    /* another set or config */
    rq.term = 6;
    rq.set_name = "other";
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
    rq.set_name = "rs0";
    rq.cfg_version = 2;
    CHECK(!sbl_rs_vote(&st, &rq, why, sizeof(why)));
}

static void test_commit_point(void)
{
    sbl_rs_config_t cfg = three(1, false, 1);
    sbl_optime_t cur = {0, 0};
    sbl_optime_t ap[3] = {ot(2, 10), ot(2, 5), ot(1, 3)};
    /* the second newest of three voters */
    cur = sbl_rs_commit_point(&cfg, ap, 2, cur);
    CHECK(cur.t == 2 && cur.ts == SBL_TS(5, 1));
    /* never back, even when positions are reported lower */
    ap[1] = ot(2, 4);
    cur = sbl_rs_commit_point(&cfg, ap, 2, cur);
    CHECK(cur.ts == SBL_TS(5, 1));
    /* only an entry of the current term commits */
    sbl_optime_t none = {0, 0};
    sbl_optime_t old[3] = {ot(3, 20), ot(2, 9), ot(2, 9)};
    sbl_optime_t c2 = sbl_rs_commit_point(&cfg, old, 3, none);
    CHECK(c2.ts == 0);
    old[1] = ot(3, 20);
    c2 = sbl_rs_commit_point(&cfg, old, 3, none);
    CHECK(c2.t == 3 && c2.ts == SBL_TS(20, 1));
    /* a position of a later term (a new primary's, reported to a former
     * primary) is not in our history: it does not carry our entry */
    sbl_optime_t later[3] = {ot(1, 30), ot(2, 25), ot(1, 20)};
    c2 = sbl_rs_commit_point(&cfg, later, 1, none);
    CHECK(c2.t == 1 && c2.ts == SBL_TS(20, 1));
    /* a member with votes 0 does not count for the majority, but counts for w:N */
    sbl_rs_config_t nv = three(0, true, 0);
    sbl_optime_t ap2[3] = {ot(1, 10), ot(1, 2), ot(1, 10)};
    c2 = sbl_rs_commit_point(&nv, ap2, 1, none);
    CHECK(c2.ts == SBL_TS(2, 1)); /* both voters needed */
    CHECK(sbl_rs_count_applied(&nv, ap2, ot(1, 10)) == 2);
    CHECK(sbl_rs_count_applied(&nv, ap2, ot(1, 2)) == 3);
    /* w:N compares optimes term first: a former primary's tail of an older
     * term (later ts) has not applied a write of the new term; a member of
     * a later term has */
    sbl_optime_t split[3] = {ot(2, 10), ot(1, 20), ot(2, 9)};
    CHECK(sbl_rs_count_applied(&nv, split, ot(2, 10)) == 1);
    CHECK(sbl_rs_count_applied(&nv, split, ot(1, 20)) == 3);
    split[1] = ot(3, 5);
    CHECK(sbl_rs_count_applied(&nv, split, ot(2, 10)) == 2);
    /* electable: priority 0 or hidden never stands */
    CHECK(!sbl_rs_electable(&nv, 2) && sbl_rs_electable(&nv, 0));
    /* a durable majority without the primary (member 0): both others of
     * three voters, each of our term and at or past the write */
    sbl_optime_t dur[3] = {{0, 0}, ot(2, 10), ot(2, 12)};
    CHECK(sbl_rs_durable_without(&cfg, 0, dur, ot(2, 10), 2));
    CHECK(!sbl_rs_durable_without(&cfg, 0, dur, ot(2, 11), 2)); /* one of two */
    dur[0] = ot(2, 50); /* the primary's own position is not counted */
    CHECK(!sbl_rs_durable_without(&cfg, 0, dur, ot(2, 11), 2));
    dur[1] = ot(3, 40); /* a later term: another branch of history */
    CHECK(!sbl_rs_durable_without(&cfg, 0, dur, ot(2, 10), 2));
    dur[1] = ot(1, 40); /* an older term: a former primary's tail, not our write */
    CHECK(!sbl_rs_durable_without(&cfg, 0, dur, ot(2, 10), 2));
    /* votes 0 members never make it; two voters need the primary itself */
    sbl_optime_t dur2[3] = {{0, 0}, ot(1, 10), ot(1, 10)};
    CHECK(!sbl_rs_durable_without(&nv, 0, dur2, ot(1, 10), 1));
}

/* The stable timestamp follows the commit point, never past what this
 * member holds of the committed history or a commit in flight. */
static void test_stable(void)
{
    /* a primary: the commit point, clamped by all_durable */
    CHECK(sbl_rs_stable_for(true, ot(2, 10), ot(2, 12), 0) == SBL_TS(10, 1));
    CHECK(sbl_rs_stable_for(true, ot(2, 10), ot(2, 12), SBL_TS(9, 1)) == SBL_TS(9, 1));
    /* a secondary behind the commit point: its own last entry */
    CHECK(sbl_rs_stable_for(false, ot(2, 10), ot(2, 7), 0) == SBL_TS(7, 1));
    /* a secondary of a later term than the commit point: the commit point */
    CHECK(sbl_rs_stable_for(false, ot(2, 10), ot(3, 12), 0) == SBL_TS(10, 1));
    /* a former primary whose tail is of an older term than the commit
     * point: its tail may not be in the committed history: none */
    CHECK(sbl_rs_stable_for(false, ot(3, 10), ot(2, 12), 0) == 0);
    CHECK(sbl_rs_stable_for(false, ot(3, 10), ot(2, 5), 0) == 0);
}

/* Arbiters: they vote but hold nothing; the commit point needs the write
 * majority of data-bearing voters; mongod's implicit default write concern. */
static void test_arbiters(void)
{
    sbl_rs_config_t psa = three(0, false, 1);
    psa.m[2].arbiter = true;
    CHECK(sbl_rs_voters(&psa) == 3 && sbl_rs_data_voters(&psa) == 2);
    CHECK(sbl_rs_write_majority(&psa) == 2 && !sbl_rs_electable(&psa, 2));
    CHECK(!sbl_rs_implicit_majority(&psa)); /* 2 data voters <= majority 2: {w: 1} */
    sbl_optime_t ap[3] = {ot(2, 10), ot(2, 8), ot(0, 0)};
    sbl_optime_t c = sbl_rs_commit_point(&psa, ap, 2, ot(0, 0));
    CHECK(c.ts == SBL_TS(8, 1)); /* the secondary's, not the arbiter's nothing */
    CHECK(sbl_rs_count_applied(&psa, ap, ot(2, 8)) == 2);
    sbl_rs_config_t pss = three(1, false, 1);
    CHECK(sbl_rs_implicit_majority(&pss));
    /* P-A-A (two arbiters of three voters): the write majority is the one
     * data-bearing voter, as mongod's writeMajorityCount */
    sbl_rs_config_t paa = three(0, false, 1);
    paa.m[1].arbiter = paa.m[2].arbiter = true;
    CHECK(sbl_rs_write_majority(&paa) == 1);
    sbl_optime_t ap2[3] = {ot(2, 10), ot(0, 0), ot(0, 0)};
    CHECK(sbl_rs_commit_point(&paa, ap2, 2, ot(0, 0)).ts == SBL_TS(10, 1));
    /* arbiters: must vote, no tags; delayed needs priority 0 */
    const char *bad[] = {
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},"
        "{\"_id\":1,\"host\":\"a:2\",\"arbiterOnly\":true,\"votes\":0}]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},"
        "{\"_id\":1,\"host\":\"a:2\",\"arbiterOnly\":true,\"tags\":{\"a\":\"b\"}}]}",
        "{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"},"
        "{\"_id\":1,\"host\":\"a:2\",\"secondaryDelaySecs\":5}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(parse_json(bad[i], &psa) == SBL_E_InvalidReplicaSetConfig);
}

/* Tags and getLastErrorModes: distinct values of each tag among the
 * data-bearing members that applied the write. */
static void test_modes(void)
{
    const char *json =
        "{\"_id\":\"rs0\",\"members\":["
        "{\"_id\":0,\"host\":\"a:1\",\"tags\":{\"dc\":\"east\",\"rack\":\"1\"}},"
        "{\"_id\":1,\"host\":\"a:2\",\"tags\":{\"dc\":\"east\",\"rack\":\"2\"}},"
        "{\"_id\":2,\"host\":\"a:3\",\"tags\":{\"dc\":\"west\"},\"priority\":0,"
        "\"secondaryDelaySecs\":60}],"
        "\"settings\":{\"getLastErrorModes\":{\"twoDCs\":{\"dc\":2},"
        "\"twoRacks\":{\"rack\":2,\"dc\":1}}}}";
    sbl_rs_config_t cfg;
    CHECK(parse_json(json, &cfg) == 0);
    CHECK(cfg.nmodes == 2 && cfg.m[2].delay_s == 60 && cfg.m[0].ntags == 2);
    int two_dcs = sbl_rs_find_mode(&cfg, "twoDCs"), racks = sbl_rs_find_mode(&cfg, "twoRacks");
    CHECK(two_dcs == 0 && racks == 1 && sbl_rs_find_mode(&cfg, "nope") == -1);
    sbl_optime_t ap[3] = {ot(2, 10), ot(2, 10), ot(2, 5)};
    CHECK(!sbl_rs_mode_satisfied(&cfg, two_dcs, ap, ot(2, 10))); /* east only */
    CHECK(sbl_rs_mode_satisfied(&cfg, racks, ap, ot(2, 10)));
    CHECK(sbl_rs_mode_satisfied(&cfg, two_dcs, ap, ot(2, 5)));
    ap[1] = ot(2, 4);
    CHECK(!sbl_rs_mode_satisfied(&cfg, racks, ap, ot(2, 10)));
    ap[1] = ot(1, 30); /* an older term's tail, however late its ts */
    CHECK(!sbl_rs_mode_satisfied(&cfg, racks, ap, ot(2, 10)));
    ap[1] = ot(3, 1); /* a later term */
    CHECK(sbl_rs_mode_satisfied(&cfg, racks, ap, ot(2, 10)));
    /* a mode naming a tag no member has */
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}],"
                     "\"settings\":{\"getLastErrorModes\":{\"m\":{\"dc\":1}}}}",
                     &cfg) == SBL_E_NoSuchKey);
}

/* Sync source choice: member 0 is us (a secondary), 1 the primary, 2 and 3
 * secondaries; pings and positions vary per case. */
static void test_sync_source(void)
{
    sbl_rs_config_t cfg = three(1, false, 1);
    cfg.n = 4;
    cfg.m[3] = cfg.m[2];
    cfg.m[3].id = 3;
    cfg.chaining = true;
    sbl_rs_candidate_t c[4];
    sbl_rs_sync_params_t sp = {.max_lag_s = 30, .threshold_ms = 5, .max_changes = 3};
    memset(c, 0, sizeof(c));
    for (int i = 1; i < 4; i++) {
        c[i].up = true;
        c[i].state = i == 1 ? SBL_RS_PRIMARY : SBL_RS_SECONDARY;
        c[i].applied = ot(1, 1000);
        c[i].ping_ms = 10;
    }
    sbl_optime_t mine = ot(1, 990);
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);  /* ties: the primary */
    c[1].ping_ms = 14;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);  /* within 5 ms */
    c[1].ping_ms = 100;
    c[3].ping_ms = 4;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 3);  /* the nearest */
    c[3].applied = ot(1, 980);
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);  /* not one behind us */
    c[3].applied = ot(1, 1000);
    cfg.m[3].hidden = true;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);  /* hidden: second pass only */
    cfg.m[3].hidden = false;
    cfg.m[3].delay_s = 60;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);  /* delayed: likewise */
    cfg.m[3].delay_s = 0;
    c[1].applied = c[2].applied = ot(1, 1100);                  /* 3 lags 100 s: skipped */
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);
    c[2].up = false;                                            /* down */
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    cfg.chaining = false;
    c[2].up = true;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);  /* chainingAllowed: false */
    c[1].up = false;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == -1);
    cfg.chaining = true;
    cfg.m[2].arbiter = true;
    c[1].up = true;
    c[1].ping_ms = 100;
    c[2].ping_ms = 1;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);  /* arbiters hold no data */
    /* a primary behind us in catch-up (nothing written in its term yet)
     * lacks our entries: not a source, with or without chaining; one level
     * with us may be.  A primary that has written in its term and only looks
     * behind (its heartbeat lags what we pulled from it) stays one. */
    cfg.m[2].arbiter = false;
    c[1].ping_ms = 1;
    c[1].applied = ot(1, 980);
    c[1].term = 1;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    c[1].term = 2;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);
    c[2].applied = c[3].applied = ot(1, 980);
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == -1);
    cfg.chaining = false;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == -1);
    c[1].applied = mine;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    cfg.chaining = true;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    /* chainingAllowed is read from the config and defaults to true */
    sbl_rs_config_t parsed;
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}],"
                     "\"settings\":{\"chainingAllowed\":false}}", &parsed) == 0);
    CHECK(!parsed.chaining);
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}]}",
                     &parsed) == 0 && parsed.chaining);
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}],"
                     "\"settings\":{\"chainingAllowed\":1}}", &parsed) ==
          SBL_E_InvalidReplicaSetConfig);
}

/* Leaving a sync source (mongod's shouldChangeSyncSource), with a fake
 * clock: member 0 is us (hidden), 1 the primary, 2 a secondary tailing it. */
static void test_source_change(void)
{
    sbl_rs_config_t cfg = three(1, false, 1);
    cfg.m[0].priority = 0;
    cfg.m[0].hidden = true;
    cfg.chaining = true;
    sbl_rs_sync_params_t sp = {.max_lag_s = 30, .threshold_ms = 5, .max_changes = 3};
    sbl_rs_source_changes_t ch;
    memset(&ch, 0, sizeof(ch));
    sbl_rs_candidate_t c[3];
    memset(c, 0, sizeof(c));
    for (int i = 1; i < 3; i++) {
        c[i].up = true;
        c[i].state = i == 1 ? SBL_RS_PRIMARY : SBL_RS_SECONDARY;
        c[i].applied = ot(1, 1000);
        c[i].term = 1;
        c[i].has_source = i == 2;
        c[i].source = 1;
    }
    sbl_optime_t mine = ot(1, 990);
    int64_t now = 10 * 1000;
    /* tailing the secondary: the primary being as near again is no reason
     * (the flapping: any fluctuation of the pings moved the member back) */
    c[1].ping_ms = 1;
    c[2].ping_ms = 4;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) == NULL);
    /* tailing the primary: a secondary 5 ms nearer is not enough, 6 ms is;
     * a source within the threshold itself is never left for ping */
    c[1].ping_ms = 12;
    c[2].ping_ms = 7;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    c[2].ping_ms = 6;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) != NULL);
    c[1].ping_ms = 5;
    c[2].ping_ms = 0;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    c[1].ping_ms = 12;
    sp.threshold_ms = 0; /* changeSyncSourceThresholdMillis: 0, never for ping */
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    sp.threshold_ms = 5;
    cfg.m[0].delay_s = 60; /* a delayed member keeps its source */
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    cfg.m[0].delay_s = 0;
    /* at most maxNumSyncSourceChangesPerHour changes an hour (every change
     * counts); then no change for ping until the oldest is an hour old */
    for (int k = 0; k < 3; k++) {
        CHECK(!sbl_rs_source_changes_too_often(&ch, 3, now));
        CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) != NULL);
        sbl_rs_source_changes_add(&ch, now);
        now += 1000;
    }
    CHECK(sbl_rs_source_changes_too_often(&ch, 3, now));
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    sp.max_changes = 4;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) != NULL);
    sp.max_changes = 3;
    now = 10 * 1000 + 3600 * 1000;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) != NULL);
    for (int k = 0; k < 100; k++) /* only the newest are kept */
        sbl_rs_source_changes_add(&ch, now + k);
    CHECK(ch.n == SBL_RS_CHANGES_KEPT && ch.at[SBL_RS_CHANGES_KEPT - 1] == now + 99);
    CHECK(sbl_rs_source_changes_too_often(&ch, SBL_RS_CHANGES_KEPT, now + 100));
    /* the rules that are not rate-limited: the source lags more than
     * maxSyncSourceLagSecs behind another member; it gets nothing (not the
     * primary, no source of its own, not ahead of us); it is down or not
     * PRIMARY/SECONDARY; chaining is off and it is not the primary */
    memset(&ch, 0, sizeof(ch));
    c[1].ping_ms = c[2].ping_ms = 1;
    mine = ot(1, 950);
    c[2].applied = ot(1, 970); /* 30 s behind the primary: still a source */
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) == NULL);
    c[2].applied = ot(1, 969);
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) != NULL);
    c[2].applied = ot(1, 990);
    c[2].has_source = false;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) == NULL);
    c[1].applied = ot(1, 960);
    c[2].applied = mine;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) != NULL);
    c[2].has_source = true;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) == NULL);
    c[2].state = SBL_RS_RECOVERING;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) != NULL);
    c[2].state = SBL_RS_SECONDARY;
    c[2].up = false;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) != NULL);
    c[2].up = true;
    cfg.chaining = false;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, now) != NULL);
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
    c[1].ping_ms = 200; /* however far the primary */
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, now) == NULL);
}

/* Cycles of sync sources (issue 24): right after a step-down, member 0 is
 * us (the old primary, now a secondary), 1 the new primary of term 2 in
 * catch-up, 2 the old secondary that still tails us; all three level.  Were
 * 0 to take 2 (nearer, level, with a source of its own), each would keep the
 * other and the new primary's writes would reach no majority. */
static void test_source_cycle(void)
{
    sbl_rs_config_t cfg = three(1, false, 1);
    cfg.chaining = true;
    sbl_rs_sync_params_t sp = {.max_lag_s = 30, .threshold_ms = 5, .max_changes = 3};
    sbl_rs_source_changes_t ch;
    memset(&ch, 0, sizeof(ch));
    sbl_rs_candidate_t c[4];
    memset(c, 0, sizeof(c));
    for (int i = 1; i < 3; i++) {
        c[i].up = true;
        c[i].state = i == 1 ? SBL_RS_PRIMARY : SBL_RS_SECONDARY;
        c[i].applied = ot(1, 1000);
        c[i].term = 2;
    }
    sbl_optime_t mine = ot(1, 1000);
    c[1].ping_ms = 30;
    c[2].ping_ms = 2;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2); /* 2 tails no one yet */
    c[2].has_source = true;
    c[2].source = 0;
    CHECK(sbl_rs_source_cycle(&cfg, c, 0, 2));
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    const char *why = sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, 0);
    CHECK(why != NULL && strcmp(why, SBL_RS_SOURCE_CYCLE_REASON) == 0);
    /* nor as the only member that could serve: it brings nothing */
    c[1].up = false;
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == -1);
    c[1].up = true;
    /* 2 tails the new primary: chaining through it is fine, and kept */
    c[2].source = 1;
    CHECK(!sbl_rs_source_cycle(&cfg, c, 0, 2));
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 2);
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, 0) == NULL);
    /* we tail the far primary and 2 tails us; then the new term's first
     * entry reaches 2, which is between sources a moment: nearer, but no
     * reason to leave the primary (2 takes us again: we would tail each
     * other); with a source that is not us it is */
    c[2].source = 0;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, 0) == NULL);
    c[2].has_source = false;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, 0) == NULL);
    c[2].applied = ot(1, 1001); /* ahead of us, it has something for us */
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, 0) != NULL);
    c[2].applied = mine;
    c[2].has_source = true;
    c[2].source = 1;
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 1, mine, &sp, &ch, 0) != NULL);
    /* a source named by host but not in our config (a newer config): not a
     * cycle, and it has a source (not "gets nothing new") */
    c[2].source = -1;
    CHECK(!sbl_rs_source_cycle(&cfg, c, 0, 2));
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, 0) == NULL);
    /* through another member: 2 tails 3, which tails us */
    cfg.n = 4;
    cfg.m[3] = cfg.m[2];
    cfg.m[3].id = 3;
    c[3] = c[2];
    c[2].source = 3;
    c[3].source = 0;
    c[3].ping_ms = 3;
    CHECK(sbl_rs_source_cycle(&cfg, c, 0, 2) && sbl_rs_source_cycle(&cfg, c, 0, 3));
    CHECK(sbl_rs_pick_sync_source(&cfg, c, 0, 1, mine, &sp) == 1);
    CHECK(sbl_rs_source_change_reason(&cfg, c, 0, 1, 2, mine, &sp, &ch, 0) != NULL);
    /* a cycle of others (2 and 3 tail each other) is not ours: the walk
     * ends, and neither tails us */
    c[3].source = 2;
    CHECK(!sbl_rs_source_cycle(&cfg, c, 0, 2) && !sbl_rs_source_cycle(&cfg, c, 0, 3));
    /* a candidate without has_source is read as tailing no one, whatever
     * its source field holds (zeroed structs elsewhere: member 0) */
    c[2].has_source = false;
    c[2].source = 0;
    CHECK(!sbl_rs_source_cycle(&cfg, c, 0, 2));
}

/* Catch-up takeover: member 0 is us, ahead; 1 the primary of term 3, in
 * catch-up (behind us); 2 a secondary. */
static void test_catchup_takeover(void)
{
    sbl_rs_config_t cfg = three(1, false, 1);
    cfg.catchup_timeout_ms = -1;
    cfg.catchup_takeover_ms = 30000;
    sbl_rs_candidate_t c[3];
    memset(c, 0, sizeof(c));
    for (int i = 1; i < 3; i++) {
        c[i].up = true;
        c[i].state = i == 1 ? SBL_RS_PRIMARY : SBL_RS_SECONDARY;
        c[i].applied = ot(2, 1000);
        c[i].term = 3;
    }
    sbl_optime_t mine = ot(2, 1005);
    CHECK(sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, -1, 3, mine));  /* no primary */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 4, mine));   /* primary of an older term */
    c[1].applied = mine;                                                /* caught up */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    c[1].applied = ot(2, 1000);
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, ot(3, 1))); /* it wrote in its term */
    c[2].applied = ot(2, 1010);                                         /* another is ahead of us */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    c[2].up = false;                                                    /* ... but down */
    CHECK(sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    c[1].up = false;
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    c[1].up = true;
    cfg.catchup_takeover_ms = -1;                                       /* off */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    cfg.catchup_takeover_ms = 0;
    CHECK(sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    cfg.catchup_timeout_ms = 0;                                         /* no catch-up at all */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    cfg.catchup_timeout_ms = -1;
    cfg.m[0].priority = 0;                                              /* not electable */
    CHECK(!sbl_rs_catchup_takeover_applies(&cfg, c, 0, 1, 3, mine));
    /* the settings: -1 or non-negative, default 30000 */
    sbl_rs_config_t parsed;
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}]}",
                     &parsed) == 0 && parsed.catchup_takeover_ms == 30000);
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}],"
                     "\"settings\":{\"catchUpTakeoverDelayMillis\":-1}}", &parsed) == 0 &&
          parsed.catchup_takeover_ms == -1);
    CHECK(parse_json("{\"_id\":\"rs0\",\"members\":[{\"_id\":0,\"host\":\"a:1\"}],"
                     "\"settings\":{\"catchUpTakeoverDelayMillis\":-2}}", &parsed) ==
          SBL_E_InvalidReplicaSetConfig);
}

/* Priority takeover freshness (mongod's _amIFreshEnoughForPriorityTakeover):
 * the term of our newest entry must be that of the newest one we know of,
 * and within 2 s of it (in the same second, 1000 increments). */
static void test_priority_takeover_fresh(void)
{
    sbl_optime_t latest = {.t = 2, .ts = SBL_TS(100, 50)};
    CHECK(sbl_rs_priority_takeover_fresh(latest, latest));
    CHECK(sbl_rs_priority_takeover_fresh(ot(2, 98), latest));
    CHECK(!sbl_rs_priority_takeover_fresh(ot(2, 97), latest));
    /* a former primary: its unreplicated tail is of term 1 with later
     * timestamps than the new primary's entries: not fresh (it must sync,
     * and roll back, first) */
    CHECK(!sbl_rs_priority_takeover_fresh(ot(1, 130), latest));
    CHECK(!sbl_rs_priority_takeover_fresh(ot(1, 100), latest));
    /* the same second: within 1000 increments */
    sbl_optime_t busy = {.t = 2, .ts = SBL_TS(100, 1500)};
    CHECK(sbl_rs_priority_takeover_fresh((sbl_optime_t){.t = 2, .ts = SBL_TS(100, 500)}, busy));
    CHECK(!sbl_rs_priority_takeover_fresh((sbl_optime_t){.t = 2, .ts = SBL_TS(100, 499)}, busy));
}

/* Periodic checkpoints: the data-bearing members take equal shares of the
 * period in config order; an arbiter has no place; two sets' members of
 * the same rank differ by their names' shift. */
static void test_checkpoint_phase(void)
{
    sbl_rs_config_t cfg = three(0, true, 1);
    double p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = sbl_rs_checkpoint_phase(&cfg, i);
        CHECK(p[i] >= i / 3.0 && p[i] < (i + 1) / 3.0);
    }
    CHECK(p[1] - p[0] > 0.333 && p[1] - p[0] < 0.334);
    CHECK(p[2] - p[1] > 0.333 && p[2] - p[1] < 0.334);
    CHECK(sbl_rs_checkpoint_phase(&cfg, -1) < 0);
    CHECK(sbl_rs_checkpoint_phase(&cfg, 3) < 0);
    cfg.m[1].arbiter = true;
    CHECK(sbl_rs_checkpoint_phase(&cfg, 1) < 0);
    double a = sbl_rs_checkpoint_phase(&cfg, 0), b = sbl_rs_checkpoint_phase(&cfg, 2);
    CHECK(a >= 0 && a < 0.5 && b >= 0.5 && b < 1 && b - a > 0.4999 && b - a < 0.5001);
    sbl_rs_config_t other = three(0, true, 1);
    snprintf(other.set_name, sizeof(other.set_name), "shard1");
    CHECK(sbl_rs_checkpoint_phase(&other, 0) != p[0]);
    CHECK(sbl_rs_checkpoint_phase(&other, 0) < 1 / 3.0);
}

int main(void)
{
    test_checkpoint_phase();
    test_priority_takeover_fresh();
    test_sync_source();
    test_source_change();
    test_source_cycle();
    test_catchup_takeover();
    test_config();
    test_arbiters();
    test_modes();
    test_votes();
    test_commit_point();
    test_stable();
    return CHECK_DONE("repl_rules");
}
