/*
 * repl_rules.c: the pure rules of protocol version 1, with no I/O and no
 * clock, so unit tests drive them alone: the config's validation, who may
 * stand for election, how a voter decides (one vote per term, never for a
 * candidate whose log is behind ours), when a catch-up takeover applies, the
 * sync source, and the majority commit point.
 *
 * What must stay true: a voter grants at most one real vote per term (the
 * caller persists last_vote before it answers); the commit point never
 * moves back and only moves to an optime of the current term.
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

int sbl_optime_cmp(sbl_optime_t a, sbl_optime_t b)
{
    if (a.t != b.t)
        return a.t < b.t ? -1 : 1;
    if (a.ts != b.ts)
        return a.ts < b.ts ? -1 : 1;
    return 0;
}

static int invalid(sbl_err_t *err, const char *fmt, const char *a, long long b)
{
    char msg[512];
    if (a != NULL)
        snprintf(msg, sizeof(msg), fmt, a, b);
    else
        snprintf(msg, sizeof(msg), fmt, b);
    return sbl_err_set(err, SBL_E_InvalidReplicaSetConfig, "%s", msg);
}

static bool get_num(const bson_t *d, const char *k, double *v)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, k) || !BSON_ITER_HOLDS_NUMBER(&it))
        return false;
    *v = BSON_ITER_HOLDS_DOUBLE(&it) ? bson_iter_double(&it) : (double)bson_iter_as_int64(&it);
    return true;
}

/* A member's tags: {name: "value" ...}, strings only, as mongod. */
static int parse_tags(const bson_t *d, sbl_rs_member_t *m, sbl_err_t *err)
{
    bson_iter_t it, tags;
    if (!bson_iter_init_find(&it, d, "tags"))
        return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return invalid(err, "BSON field 'MemberConfig.tags' is the wrong type, expected type "
                       "'object'", NULL, 0);
    bson_iter_recurse(&it, &tags);
    while (bson_iter_next(&tags)) {
        const char *k = bson_iter_key(&tags);
        if (!BSON_ITER_HOLDS_UTF8(&tags))
            return invalid(err, "tags.%s field has non-string value of type %lld", k,
                           bson_iter_type(&tags));
        const char *v = bson_iter_utf8(&tags, NULL);
        if (m->ntags == SBL_RS_MAX_TAGS || strlen(k) >= SBL_RS_NAME_LEN ||
            strlen(v) >= SBL_RS_NAME_LEN)
            return invalid(err, "too many or too long tags (at most %lld of 63 bytes here)", NULL,
                           SBL_RS_MAX_TAGS);
        strcpy(m->tags[m->ntags].k, k);
        strcpy(m->tags[m->ntags++].v, v);
    }
    return 0;
}

static int parse_member(const bson_t *d, sbl_rs_member_t *m, sbl_err_t *err)
{
    bson_iter_t it;
    double v;

    if (!bson_iter_init_find(&it, d, "_id"))
        return invalid(err, "BSON field 'MemberConfig._id' is missing but a required field",
                       NULL, 0);
    if (!BSON_ITER_HOLDS_NUMBER(&it))
        return invalid(err, "BSON field 'MemberConfig._id' is the wrong type, expected a number",
                       NULL, 0);
    long long id = bson_iter_as_int64(&it);
    if (id < 0 || id > 255)
        return invalid(err, "_id field value of %lld is out of range.", NULL, id);
    m->id = (int)id;
    if (!bson_iter_init_find(&it, d, "host"))
        return invalid(err, "BSON field 'MemberConfig.host' is missing but a required field",
                       NULL, 0);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return invalid(err, "BSON field 'MemberConfig.host' is the wrong type, expected type "
                       "'string'", NULL, 0);
    const char *host = bson_iter_utf8(&it, NULL);
    if (strlen(host) == 0 || strlen(host) >= sizeof(m->host))
        return invalid(err, "Empty or too long host name in member %lld", NULL, id);
    strcpy(m->host, host);
    m->priority = 1.0;
    m->votes = 1;
    m->hidden = false;
    m->arbiter = false;
    m->build_indexes = true;
    m->delay_s = 0;
    m->ntags = 0;
    if (get_num(d, "priority", &v)) {
        if (v < 0 || v > 1000)
            return invalid(err, "priority field value of %lld is out of range", NULL, (long long)v);
        m->priority = v;
    }
    if (get_num(d, "votes", &v)) {
        if (v != 0 && v != 1)
            return invalid(err, "votes field value is %lld but must be 0 or 1", NULL,
                           (long long)v);
        m->votes = (int)v;
    }
    if (bson_iter_init_find(&it, d, "hidden"))
        m->hidden = bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, d, "arbiterOnly"))
        m->arbiter = bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, d, "buildIndexes"))
        m->build_indexes = bson_iter_as_bool(&it);
    if (get_num(d, "secondaryDelaySecs", &v)) {
        if (v < 0 || v > SBL_RS_MAX_DELAY_S)
            return invalid(err, "secondaryDelaySecs field value of %lld seconds is out of range",
                           NULL, (long long)v);
        m->delay_s = (int64_t)v;
    }
    SBL_RET(parse_tags(d, m, err));
    if (m->arbiter) { /* mongod: an arbiter's default priority is 0 */
        if (m->priority == 1.0)
            m->priority = 0;
        if (m->votes == 0)
            return invalid(err, "Arbiter must vote (cannot have 0 votes)", NULL, 0);
        if (m->ntags > 0)
            return invalid(err, "Cannot set tags on arbiters.", NULL, 0);
    }
    if (m->priority != 0) {
        if (m->votes == 0)
            return invalid(err, "priority must be 0 when non-voting (votes:0)", NULL, 0);
        if (m->delay_s > 0)
            return invalid(err, "priority must be 0 when secondaryDelaySecs is used", NULL, 0);
        if (m->hidden)
            return invalid(err, "priority must be 0 when hidden=true", NULL, 0);
        if (!m->build_indexes)
            return invalid(err, "priority must be 0 when buildIndexes=false", NULL, 0);
    }
    return 0;
}

/* settings.getLastErrorModes: {mode: {tag: count ...} ...}; every tag must
 * be some member's, every count positive. */
static int parse_modes(const bson_t *st, sbl_rs_config_t *cfg, sbl_err_t *err)
{
    bson_iter_t it, modes, cons;
    if (!bson_iter_init_find(&it, st, "getLastErrorModes"))
        return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return invalid(err, "settings.getLastErrorModes must be an object", NULL, 0);
    bson_iter_recurse(&it, &modes);
    while (bson_iter_next(&modes)) {
        const char *name = bson_iter_key(&modes);
        if (cfg->nmodes == SBL_RS_MAX_MODES || strlen(name) >= SBL_RS_NAME_LEN)
            return invalid(err, "too many or too long getLastErrorModes (at most %lld here)",
                           NULL, SBL_RS_MAX_MODES);
        if (!BSON_ITER_HOLDS_DOCUMENT(&modes))
            return invalid(err, "Expected settings.getLastErrorModes.%s to be an Object", name,
                           0);
        sbl_rs_mode_t *md = &cfg->modes[cfg->nmodes];
        memset(md, 0, sizeof(*md));
        strcpy(md->name, name);
        bson_iter_recurse(&modes, &cons);
        while (bson_iter_next(&cons)) {
            const char *tag = bson_iter_key(&cons);
            if (md->n == SBL_RS_MAX_TAGS || strlen(tag) >= SBL_RS_NAME_LEN)
                return invalid(err, "too many or too long tags in getLastErrorModes.%s", name, 0);
            long long count = BSON_ITER_HOLDS_NUMBER(&cons) ? bson_iter_as_int64(&cons) : 0;
            if (count <= 0)
                return invalid(err, "Value of getLastErrorModes.%s must be positive, not %lld",
                               name, count);
            bool known = false;
            for (int i = 0; i < cfg->n && !known; i++)
                for (int t = 0; t < cfg->m[i].ntags; t++)
                    known |= strcmp(cfg->m[i].tags[t].k, tag) == 0;
            if (!known)
                return sbl_err_set(err, SBL_E_NoSuchKey, "No replica set member has tag key "
                                   "\"%s\" used in getLastErrorModes.%s", tag, name);
            strcpy(md->tag[md->n], tag);
            md->count[md->n++] = (int)count;
        }
        cfg->nmodes++;
    }
    return 0;
}

int sbl_rs_config_parse(const bson_t *doc, sbl_rs_config_t *cfg, sbl_err_t *err)
{
    bson_iter_t it, ms;
    double v;

    memset(cfg, 0, sizeof(*cfg));
    if (!bson_iter_init_find(&it, doc, "_id"))
        return invalid(err, "BSON field 'ReplSetConfig._id' is missing but a required field",
                       NULL, 0);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return invalid(err, "BSON field 'ReplSetConfig._id' is the wrong type, expected type "
                       "'string'", NULL, 0);
    const char *id = bson_iter_utf8(&it, NULL);
    if (id[0] == '\0' || strlen(id) >= sizeof(cfg->set_name))
        return invalid(err, "Replica set configuration must have non-empty _id field", NULL, 0);
    strcpy(cfg->set_name, id);
    cfg->version = get_num(doc, "version", &v) ? (int64_t)v : 1;
    if (cfg->version < 1 || cfg->version > INT32_MAX)
        return invalid(err, "version field value of %lld is out of range", NULL,
                       (long long)cfg->version);
    cfg->term = get_num(doc, "term", &v) ? (int64_t)v : -1;
    if (!bson_iter_init_find(&it, doc, "members"))
        return invalid(err, "BSON field 'ReplSetConfig.members' is missing but a required field",
                       NULL, 0);
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return invalid(err, "BSON field 'ReplSetConfig.members' is the wrong type, expected "
                       "type 'array'", NULL, 0);
    bson_iter_recurse(&it, &ms);
    while (bson_iter_next(&ms)) {
        uint32_t len;
        const uint8_t *data;
        bson_t d;
        if (cfg->n == SBL_RS_MAX_MEMBERS)
            return invalid(err, "Replica set configuration contains %lld members, but must have "
                           "at least 1 and no more than 50", NULL, SBL_RS_MAX_MEMBERS + 1);
        if (!BSON_ITER_HOLDS_DOCUMENT(&ms))
            return invalid(err, "Expected type object for members element", NULL, 0);
        bson_iter_document(&ms, &len, &data);
        if (!bson_init_static(&d, data, len))
            return invalid(err, "Expected type object for members element", NULL, 0);
        SBL_RET(parse_member(&d, &cfg->m[cfg->n], err));
        for (int j = 0; j < cfg->n; j++) {
            if (cfg->m[j].id == cfg->m[cfg->n].id)
                return invalid(err, "Found two member configurations with same _id field, "
                               "members.%s._id == %lld", bson_iter_key(&ms), cfg->m[j].id);
            if (strcasecmp(cfg->m[j].host, cfg->m[cfg->n].host) == 0)
                return invalid(err, "Found two member configurations with same host field, "
                               "%s (member %lld)", cfg->m[j].host, cfg->m[cfg->n].id);
        }
        cfg->n++;
    }
    if (cfg->n == 0)
        return invalid(err, "Replica set configuration contains %lld members, but must have at "
                       "least 1 and no more than 50", NULL, 0);
    int voters = sbl_rs_voters(cfg), electable = 0;
    for (int i = 0; i < cfg->n; i++)
        electable += sbl_rs_electable(cfg, i);
    if (voters > SBL_RS_MAX_VOTERS)
        return invalid(err, "Replica set configuration contains %lld voting members, but must "
                       "be at least 1 and no more than 7", NULL, voters);
    if (voters == 0 || electable == 0)
        return invalid(err, "Replica set configuration must contain at least one non-arbiter "
                       "member with priority > 0%s", " and one voting member", 0);
    cfg->heartbeat_ms = 2000;
    cfg->election_timeout_ms = 10000;
    cfg->chaining = true;
    cfg->catchup_timeout_ms = -1;
    cfg->catchup_takeover_ms = 30000;
    if (bson_iter_init_find(&it, doc, "settings") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t st;
        bson_iter_document(&it, &len, &data);
        if (bson_init_static(&st, data, len)) {
            if (get_num(&st, "heartbeatIntervalMillis", &v)) {
                if (v <= 0)
                    return invalid(err, "settings.heartbeatIntervalMillis field value must be "
                                   "positive, not %lld", NULL, (long long)v);
                cfg->heartbeat_ms = (int64_t)v;
            }
            if (get_num(&st, "electionTimeoutMillis", &v)) {
                if (v <= 0)
                    return invalid(err, "settings.electionTimeoutMillis field value must be "
                                   "positive, not %lld", NULL, (long long)v);
                cfg->election_timeout_ms = (int64_t)v;
            }
            bson_iter_t ch;
            if (bson_iter_init_find(&ch, &st, "chainingAllowed")) {
                if (!BSON_ITER_HOLDS_BOOL(&ch))
                    return invalid(err, "settings.chainingAllowed field must be a boolean%s",
                                   "", 0);
                cfg->chaining = bson_iter_bool(&ch);
            }
            if (get_num(&st, "catchUpTimeoutMillis", &v)) {
                if (v < -1)
                    return invalid(err, "settings.catchUpTimeoutMillis field value must be -1 "
                                   "or non-negative, not %lld", NULL, (long long)v);
                cfg->catchup_timeout_ms = (int64_t)v;
            }
            if (get_num(&st, "catchUpTakeoverDelayMillis", &v)) {
                if (v < -1)
                    return invalid(err, "settings.catchUpTakeoverDelayMillis field value must "
                                   "be -1 or non-negative, not %lld", NULL, (long long)v);
                cfg->catchup_takeover_ms = (int64_t)v;
            }
            SBL_RET(parse_modes(&st, cfg, err));
        }
    }
    return 0;
}

int sbl_rs_voters(const sbl_rs_config_t *cfg)
{
    int n = 0;
    for (int i = 0; i < cfg->n; i++)
        n += cfg->m[i].votes > 0;
    return n;
}

int sbl_rs_majority(const sbl_rs_config_t *cfg)
{
    return sbl_rs_voters(cfg) / 2 + 1;
}

double sbl_rs_checkpoint_phase(const sbl_rs_config_t *cfg, int self)
{
    if (self < 0 || self >= cfg->n || cfg->m[self].arbiter)
        return -1.0;
    int rank = 0, n = 0;
    for (int i = 0; i < cfg->n; i++)
        if (!cfg->m[i].arbiter) {
            rank += i < self;
            n++;
        }
    uint64_t h = sbl_fnv1a((const uint8_t *)cfg->set_name, strlen(cfg->set_name));
    return (rank + (double)(h % 1000) / 1000.0) / n;
}

bool sbl_rs_electable(const sbl_rs_config_t *cfg, int i)
{
    return i >= 0 && i < cfg->n && cfg->m[i].priority > 0 && cfg->m[i].votes > 0 &&
           !cfg->m[i].hidden && !cfg->m[i].arbiter;
}

bool sbl_rs_vote(sbl_vote_state_t *st, const sbl_vote_req_t *req, char *reason, size_t n)
{
    reason[0] = '\0';
    if (req->set_name == NULL || st->set_name == NULL || strcmp(req->set_name, st->set_name) != 0) {
        snprintf(reason, n, "candidate's set name (%s) differs from mine (%s)",
                 req->set_name ? req->set_name : "", st->set_name ? st->set_name : "");
        return false;
    }
    if (req->term < st->term) {
        snprintf(reason, n, "candidate's term (%lld) is lower than mine (%lld)",
                 (long long)req->term, (long long)st->term);
        return false;
    }
    if (!req->dry_run && req->term > st->term)
        st->term = req->term;
    if (req->cfg_version != st->cfg_version || (req->cfg_term != -1 && st->cfg_term != -1 &&
                                                req->cfg_term != st->cfg_term)) {
        snprintf(reason, n, "candidate's config with {version: %lld, term: %lld} differs from "
                 "mine with {version: %lld, term: %lld}", (long long)req->cfg_version,
                 (long long)req->cfg_term, (long long)st->cfg_version, (long long)st->cfg_term);
        return false;
    }
    if (sbl_optime_cmp(req->last_applied, st->last_applied) < 0) {
        snprintf(reason, n, "candidate's data is staler than mine. candidate's last applied "
                 "OpTime: { ts: %u.%u, t: %lld }, my last applied OpTime: { ts: %u.%u, t: %lld }",
                 SBL_TS_SECS(req->last_applied.ts), SBL_TS_INC(req->last_applied.ts),
                 (long long)req->last_applied.t, SBL_TS_SECS(st->last_applied.ts),
                 SBL_TS_INC(st->last_applied.ts), (long long)st->last_applied.t);
        return false;
    }
    if (!req->dry_run && st->last_vote_term == req->term) {
        snprintf(reason, n, "already voted for another candidate (member %d) this term (%lld)",
                 st->last_vote_candidate, (long long)req->term);
        return false;
    }
    if (!req->dry_run) {
        st->last_vote_term = req->term;
        st->last_vote_candidate = req->candidate;
    }
    return true;
}

static int cmp_desc(const void *a, const void *b)
{
    return -sbl_optime_cmp(*(const sbl_optime_t *)a, *(const sbl_optime_t *)b);
}

sbl_optime_t sbl_rs_commit_point(const sbl_rs_config_t *cfg, const sbl_optime_t *applied,
                                 int64_t term, sbl_optime_t current)
{
    sbl_optime_t v[SBL_RS_MAX_MEMBERS];
    int nv = 0;
    /* A position of a later term than ours is on another branch of history:
     * it says nothing of our entries (counting it as "at least ours" once
     * moved a returning former primary's commit point onto its own entries). */
    for (int i = 0; i < cfg->n; i++)
        if (cfg->m[i].votes > 0 && !cfg->m[i].arbiter)
            v[nv++] = applied[i].t <= term ? applied[i] : (sbl_optime_t){0, 0};
    int maj = sbl_rs_write_majority(cfg);
    if (nv == 0 || maj < 1)
        return current;
    qsort(v, (size_t)nv, sizeof(v[0]), cmp_desc);
    sbl_optime_t cand = v[maj - 1];
    if (cand.t == term && sbl_optime_cmp(cand, current) > 0)
        return cand;
    return current;
}

bool sbl_rs_durable_without(const sbl_rs_config_t *cfg, int self, const sbl_optime_t *durable,
                            sbl_optime_t op, int64_t term)
{
    int n = 0, maj = sbl_rs_write_majority(cfg);
    for (int i = 0; i < cfg->n; i++)
        n += i != self && cfg->m[i].votes > 0 && !cfg->m[i].arbiter && durable[i].t <= term &&
             sbl_optime_cmp(durable[i], op) >= 0;
    return maj >= 1 && n >= maj;
}

int sbl_rs_data_voters(const sbl_rs_config_t *cfg)
{
    int n = 0;
    for (int i = 0; i < cfg->n; i++)
        n += cfg->m[i].votes > 0 && !cfg->m[i].arbiter;
    return n;
}

int sbl_rs_arbiters(const sbl_rs_config_t *cfg)
{
    int n = 0;
    for (int i = 0; i < cfg->n; i++)
        n += cfg->m[i].arbiter;
    return n;
}

int sbl_rs_write_majority(const sbl_rs_config_t *cfg)
{
    int maj = sbl_rs_majority(cfg), data = sbl_rs_data_voters(cfg);
    return maj < data ? maj : data;
}

bool sbl_rs_implicit_majority(const sbl_rs_config_t *cfg)
{
    return !(sbl_rs_arbiters(cfg) > 0 && sbl_rs_data_voters(cfg) <= sbl_rs_majority(cfg));
}

int sbl_rs_find_mode(const sbl_rs_config_t *cfg, const char *name)
{
    for (int i = 0; i < cfg->nmodes; i++)
        if (strcmp(cfg->modes[i].name, name) == 0)
            return i;
    return -1;
}

bool sbl_rs_mode_satisfied(const sbl_rs_config_t *cfg, int m, const sbl_optime_t *applied,
                           sbl_optime_t op)
{
    const sbl_rs_mode_t *md = &cfg->modes[m];
    for (int c = 0; c < md->n; c++) {
        const char *seen[SBL_RS_MAX_MEMBERS];
        int nseen = 0;
        for (int i = 0; i < cfg->n; i++) {
            if (cfg->m[i].arbiter || sbl_optime_cmp(applied[i], op) < 0)
                continue;
            for (int t = 0; t < cfg->m[i].ntags; t++) {
                if (strcmp(cfg->m[i].tags[t].k, md->tag[c]) != 0)
                    continue;
                bool dup = false;
                for (int j = 0; j < nseen && !dup; j++)
                    dup = strcmp(seen[j], cfg->m[i].tags[t].v) == 0;
                if (!dup)
                    seen[nseen++] = cfg->m[i].tags[t].v;
            }
        }
        if (nseen < md->count[c])
            return false;
    }
    return true;
}

int sbl_rs_count_applied(const sbl_rs_config_t *cfg, const sbl_optime_t *applied,
                         sbl_optime_t op)
{
    int n = 0;
    for (int i = 0; i < cfg->n; i++)
        n += !cfg->m[i].arbiter && sbl_optime_cmp(applied[i], op) >= 0;
    return n;
}

uint64_t sbl_rs_stable_for(bool primary, sbl_optime_t commit, sbl_optime_t applied,
                           uint64_t all_durable)
{
    uint64_t stable = 0;
    if (primary)
        stable = commit.ts;
    else if (commit.t <= applied.t)
        stable = commit.ts < applied.ts ? commit.ts : applied.ts;
    if (all_durable != 0 && all_durable < stable)
        stable = all_durable;
    return stable;
}

bool sbl_rs_priority_takeover_fresh(sbl_optime_t mine, sbl_optime_t latest)
{
    uint32_t my_s = SBL_TS_SECS(mine.ts), latest_s = SBL_TS_SECS(latest.ts);
    if (mine.t != latest.t)
        return false;
    if (my_s != latest_s)
        return (int64_t)my_s + SBL_RS_PRIORITY_TAKEOVER_WINDOW_S >= (int64_t)latest_s;
    return (int64_t)SBL_TS_INC(mine.ts) + 1000 >= (int64_t)SBL_TS_INC(latest.ts);
}

bool sbl_rs_catchup_takeover_applies(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c,
                                     int self, int primary, int64_t term, sbl_optime_t mine)
{
    if (cfg->catchup_takeover_ms < 0 || cfg->catchup_timeout_ms == 0 || primary < 0 ||
        primary == self || !c[primary].up || c[primary].term != term ||
        !sbl_rs_electable(cfg, self) || mine.t >= term ||
        sbl_optime_cmp(c[primary].applied, mine) >= 0)
        return false;
    for (int i = 0; i < cfg->n; i++)
        if (i != self && c[i].up && sbl_optime_cmp(c[i].applied, mine) > 0)
            return false; /* another would take over from us at once */
    return true;
}

/* A primary that has written nothing in its term yet (its first entry, the
 * election's no-op, comes when catch-up ends) may lack entries we hold; one
 * that has is never behind us for long: the applied optime heartbeats report
 * lags what we just pulled from it, so that alone must not drop it. */
static bool catching_up(const sbl_rs_candidate_t *p)
{
    return p->applied.t < p->term;
}

bool sbl_rs_source_cycle(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c, int self,
                         int i)
{
    for (int hops = 0; hops < cfg->n && i >= 0 && c[i].has_source; hops++) {
        i = c[i].source;
        if (i == self)
            return true;
    }
    return false;
}

/* Whether member i may serve as a sync source in pass first (0) or the
 * second (1), by the rules above sbl_rs_pick_sync_source. */
static bool may_serve(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c, int self,
                      int primary, sbl_optime_t mine, uint32_t oldest_s, int i, int pass)
{
    const sbl_rs_member_t *m = &cfg->m[i];
    if (i == self || !c[i].up || m->arbiter ||
        (c[i].state != SBL_RS_PRIMARY && c[i].state != SBL_RS_SECONDARY))
        return false;
    if (sbl_optime_cmp(c[i].applied, mine) < 0 && (i != primary || catching_up(&c[i])))
        return false; /* behind us: a primary too while in catch-up (it lacks our entries) */
    if (sbl_rs_source_cycle(cfg, c, self, i))
        return false;
    if (i == primary)
        return true;
    if (pass == 0 && (m->hidden || m->delay_s > 0 || (m->votes == 0 && cfg->m[self].votes > 0) ||
                      (uint32_t)(c[i].applied.ts >> 32) < oldest_s))
        return false;
    return true;
}

/* The oldest second a member may have reached to serve in the first pass:
 * max_lag_s before the primary's newest entry (0: no primary known). */
static uint32_t oldest_allowed_s(const sbl_rs_candidate_t *c, int primary,
                                 const sbl_rs_sync_params_t *p)
{
    uint32_t newest_s = primary >= 0 ? (uint32_t)(c[primary].applied.ts >> 32) : 0;
    return newest_s > p->max_lag_s ? newest_s - (uint32_t)p->max_lag_s : 0;
}

int sbl_rs_pick_sync_source(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c, int self,
                            int primary, sbl_optime_t mine, const sbl_rs_sync_params_t *p)
{
    if (!cfg->chaining)
        return primary >= 0 && primary != self && c[primary].up &&
                       (sbl_optime_cmp(c[primary].applied, mine) >= 0 ||
                        !catching_up(&c[primary])) ? primary : -1;
    uint32_t oldest_s = oldest_allowed_s(c, primary, p);
    for (int pass = 0; pass < 2; pass++) {
        int best = -1;
        for (int i = 0; i < cfg->n; i++)
            if (may_serve(cfg, c, self, primary, mine, oldest_s, i, pass) &&
                (best < 0 || c[i].ping_ms < c[best].ping_ms))
                best = i;
        if (best >= 0 && primary >= 0 && best != primary &&
            may_serve(cfg, c, self, primary, mine, oldest_s, primary, pass) &&
            c[primary].ping_ms <= c[best].ping_ms + p->threshold_ms)
            best = primary; /* the primary unless another is clearly nearer */
        if (best >= 0)
            return best;
    }
    return -1;
}

void sbl_rs_source_changes_add(sbl_rs_source_changes_t *h, int64_t now_ms)
{
    if (h->n == SBL_RS_CHANGES_KEPT) {
        memmove(h->at, h->at + 1, (SBL_RS_CHANGES_KEPT - 1) * sizeof(h->at[0]));
        h->n--;
    }
    h->at[h->n++] = now_ms;
}

bool sbl_rs_source_changes_too_often(const sbl_rs_source_changes_t *h, int max, int64_t now_ms)
{
    int recent = 0;
    for (int i = 0; i < h->n; i++)
        recent += now_ms - h->at[i] < 3600 * 1000;
    return recent >= max;
}

/* Member i gets nothing new: not the primary, tailing no one (by its last
 * heartbeat) and not ahead of us.  Such a member is between sources, and its
 * next choice may well be us. */
static bool gets_nothing(const sbl_rs_candidate_t *c, int primary, sbl_optime_t mine, int i)
{
    return i != primary && !c[i].has_source && sbl_optime_cmp(c[i].applied, mine) <= 0;
}

const char *sbl_rs_source_change_reason(const sbl_rs_config_t *cfg, const sbl_rs_candidate_t *c,
                                        int self, int primary, int cur, sbl_optime_t mine,
                                        const sbl_rs_sync_params_t *p,
                                        const sbl_rs_source_changes_t *changes, int64_t now_ms)
{
    if (!cfg->chaining && cur != primary)
        return "chaining is disallowed and the sync source is not the primary";
    if (!c[cur].up || (c[cur].state != SBL_RS_PRIMARY && c[cur].state != SBL_RS_SECONDARY))
        return "the sync source is down or neither primary nor secondary";
    if (sbl_rs_source_cycle(cfg, c, self, cur))
        return SBL_RS_SOURCE_CYCLE_REASON;
    if (gets_nothing(c, primary, mine, cur))
        return "the sync source is not primary, has no sync source and is not ahead of us";
    uint32_t cur_s = (uint32_t)(c[cur].applied.ts >> 32), oldest_s = oldest_allowed_s(c, primary, p);
    for (int i = 0; i < cfg->n; i++)
        if (i != cur && may_serve(cfg, c, self, primary, mine, oldest_s, i, 1) &&
            (int64_t)cur_s + p->max_lag_s < (int64_t)(c[i].applied.ts >> 32))
            return "the sync source is more than maxSyncSourceLagSecs behind another member";
    if (!cfg->chaining || p->threshold_ms <= 0 || cfg->m[self].delay_s > 0 ||
        c[cur].ping_ms <= p->threshold_ms)
        return NULL; /* without chaining the primary is the only choice, however far */
    /* nor is one that gets nothing a reason to move: after a step-down the
     * old secondary that tails us is between sources a moment when the new
     * term's first entry reaches it; were we to move to it on that view while
     * it takes us again, we would tail each other (heartbeats come late on a
     * loaded host: seen as cycles of a second or two, again and again) */
    for (int i = 0; i < cfg->n; i++)
        if (i != cur && may_serve(cfg, c, self, primary, mine, oldest_s, i, 0) &&
            !gets_nothing(c, primary, mine, i) && c[i].ping_ms + p->threshold_ms < c[cur].ping_ms)
            return sbl_rs_source_changes_too_often(changes, p->max_changes, now_ms)
                       ? NULL /* mongod logs that it keeps its source: too many changes */
                       : "another member is nearer by more than changeSyncSourceThresholdMillis";
    return NULL;
}
