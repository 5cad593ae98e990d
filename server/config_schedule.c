/*
 * server/config_schedule.c — the schedule blocks of the config loader:
 * schedule "NAME" { cron | rate | at, timezone, set, event, catch_up,
 * enabled }, each mistake at the line of its key, checked by the same code
 * the scheduler runs (sl_schedule_compile(), server/schedule.h), and the
 * check that needs the whole file (the set is declared).
 */
#include "server/config_internal.h"

#include "core/base/slog.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys before event, then after it (event is read here: its value is
 * any table, kept as JSON). */
static const key schedule_keys[] = {
    {"cron", K_STRING, FIELD(sl_schedule_decl, cron), 0, 0, "one of cron, rate, at",
     "AWS's six cron fields, `\"0 3 * * ? *\"`: minutes hours day-of-month month day-of-week "
     "year, with `, - * / ? L W #` (docs/schedules.md)"},
    {"rate", K_STRING, FIELD(sl_schedule_decl, rate), 0, 0, "one of cron, rate, at",
     "`\"5 minutes\"`: N minute(s), hour(s) or day(s); ticks at the multiples of the period "
     "since the Unix epoch"},
    {"at", K_STRING, FIELD(sl_schedule_decl, at), 0, 0, "one of cron, rate, at",
     "`\"2026-12-24T18:00:00\"` (read in `timezone`), or RFC 3339 with an offset: fires once"},
    {"timezone", K_STRING, FIELD(sl_schedule_decl, timezone), 0, 0, "\"UTC\"",
     "the time zone `cron` and `at` are read in (`\"Europe/Paris\"`, from /usr/share/zoneinfo); "
     "a time DST skips fires once at the jump, a repeated one once"},
    {"set", K_STRING, FIELD(sl_schedule_decl, set), 0, 0, "required",
     "the event set the events go to (declared with `set`)"},
};
static const key schedule_keys2[] = {
    {"catch_up", K_INT, FIELD(sl_schedule_decl, catch_up), 0, SL_SCHEDULE_CATCH_UP_MAX, "1",
     "after a downtime, how many of the missed ticks fire (the latest ones, oldest first); 0: "
     "none"},
    {"enabled", K_BOOL, FIELD(sl_schedule_decl, enabled), 0, 0, "true",
     "false fires nothing (and, enabled again, does not catch up on the time it was off)"},
};

static const char event_doc[] =
    "`{ type = \"…\", source = \"…\", data = …, subject = \"…\", … }`: the CloudEvent each "
    "tick publishes (type and source required; other string attributes are extensions); "
    "`specversion`, `id` (from the schedule and the tick) and `time` (the tick) are added";

static const sl_schedule_decl *find_schedule(const sl_config *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->nschedules; i++)
        if (cfg->schedules[i].name && strcmp(cfg->schedules[i].name, name) == 0)
            return &cfg->schedules[i];
    return NULL;
}

static const key *find_key(const char *name)
{
    for (size_t i = 0; i < sizeof schedule_keys / sizeof *schedule_keys; i++)
        if (strcmp(schedule_keys[i].name, name) == 0)
            return &schedule_keys[i];
    for (size_t i = 0; i < sizeof schedule_keys2 / sizeof *schedule_keys2; i++)
        if (strcmp(schedule_keys2[i].name, name) == 0)
            return &schedule_keys2[i];
    return NULL;
}

static void read_event(loader *ld, int idx, const block *b, sl_schedule_decl *d)
{
    int line = sl__config_key_line(ld, b->line, "event");
    if (!lua_istable(ld->L, idx)) {
        sl__config_problem(ld, line,
                           "%s: event must be a table { type = \"…\", source = \"…\", data = … }, "
                           "not a %s",
                           b->what, luaL_typename(ld->L, idx));
        return;
    }
    char what[260];
    snprintf(what, sizeof what, "%s: event", b->what);
    free(d->event_json);
    d->event_json = sl__config_lua_to_json(ld, idx, line, what);
}

void sl__config_read_schedule(loader *ld, int body, const char *name, int line)
{
    lua_State *L = ld->L;
    sl_config *cfg = ld->cfg;
    char what[200];
    snprintf(what, sizeof what, "schedule \"%s\"", name);
    const sl_schedule_decl *prev = find_schedule(cfg, name);
    if (prev && ld->in_api) { /* the file's wins, as for rules */
        sl_slog(SL_SLOG_WARN, "config",
                "schedule %s: the config file declares it; the EventBridge API's schedule of that "
                "name is not run",
                name);
        return;
    }
    int errors = ld->nerrors;
    if (!sl_set_name_valid(name))
        sl__config_problem(
            ld, line, "%s: a schedule name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .",
            what);
    else if (prev)
        sl__config_problem(ld, line, "%s is declared twice (first at line %d)", what, prev->line);
    sl_schedule_decl *g = sl__config_grow(ld, cfg->schedules, cfg->nschedules, sizeof *g);
    if (!g)
        return;
    cfg->schedules = g;
    sl_schedule_decl *d = &cfg->schedules[cfg->nschedules++];
    sl_schedule_decl_init(d);
    d->name = sl__config_dup(ld, name, strlen(name));
    d->line = line;
    d->api = ld->in_api;
    block b = {what, line, d};
    lua_pushnil(L);
    while (lua_next(L, body)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const key *kk = k ? find_key(k) : NULL;
        if (!k)
            sl__config_problem(ld, line,
                               "%s: every entry needs a name (name = value); found a positional %s",
                               what, luaL_typename(L, -1));
        else if (strcmp(k, "event") == 0)
            read_event(ld, lua_gettop(L), &b, d);
        else if (kk)
            sl__config_read_key(ld, kk, &b, NULL);
        else
            sl__config_problem(ld, sl__config_key_line(ld, line, k),
                               "%s: unknown key \"%s\" (known: cron, rate, at, timezone, set, "
                               "event, catch_up, enabled)",
                               what, k);
        lua_pop(L, 1);
    }
    if (ld->nerrors != errors || ld->oom)
        return; /* the block's own mistakes are said; the rest would repeat them */
    /* The scheduler's own checks: the expression in its zone, the event. */
    sl_error err = {0};
    const char *kname = "";
    if (sl_schedule_compile(d, NULL, &kname, &err))
        sl__config_problem(ld, kname[0] ? sl__config_key_line(ld, line, kname) : line, "%s: %s",
                           what, err.msg);
}

/* The set must be declared: a schedule whose set was made on first use
 * would change where its events go when the set's defaults change, and a
 * typo would make a set nobody reads. */
void sl__config_check_schedules(loader *ld)
{
    sl_config *cfg = ld->cfg;
    for (size_t i = 0; i < cfg->nschedules; i++) {
        const sl_schedule_decl *d = &cfg->schedules[i];
        if (d->set && sl_set_name_valid(d->set) && !sl__config_find_set(cfg, d->set))
            sl__config_problem(ld, sl__config_key_line(ld, d->line, "set"),
                               "schedule \"%s\": set \"%s\" is not declared (add set \"%s\" { })",
                               d->name ? d->name : "?", d->set, d->set);
    }
}

int sl__config_schedule_markdown(sl_buf *out)
{
    int rc = sl__config_keys_table(out, "schedule \"NAME\" { … }", KEYS(schedule_keys));
    if (!rc)
        rc = sl_buf_printf(out, "| `event` | table | required | %s |\n", event_doc);
    if (!rc)
        rc = sl__config_keys_rows(out, KEYS(schedule_keys2));
    return rc;
}
