/*
 * connectors/source_file_lines.c — source.file: from the bytes read to
 * events (docs/sources.md), run by the instance's thread (source_file.c).
 *
 * Bytes are split at '\n' (a trailing '\r' left out); a final line
 * without '\n' is held until its newline comes (sl__source_file_drain_held()
 * emits it when its file is gone). A line longer than max_line is split into
 * pieces (split_long) or skipped. With multiline, a line matching the regex
 * starts an event and the lines after it join it ('\n' between) until the
 * next match, max_line, or multiline_timeout_ms of quiet. Each line or group
 * becomes an event by parse: text, json (a CloudEvent line as it is, other
 * JSON as data, the rest as text) or a Lua function (which the host runs:
 * SL_DATA_PARSE, core/bus/connector.h). Every event gets the id
 * DEV-INO-GEN-OFFSET (source_file.c says why) unless it is a CloudEvent
 * with its own; the generation is on disk before an id names it.
 */
#include "connectors/source_file_internal.h"

#include "core/bus/event.h"
#include "core/base/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_MAX 96 /* DEV-INO-GEN-OFFSET */

/* ---- events ---------------------------------------------------------------------- */

/* True when the validated object obj has a top-level "specversion" member. */
static bool has_specversion(const sl_json_tok *obj)
{
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v))
        if (k.len == 13 && memcmp(k.p, "\"specversion\"", 13) == 0)
            return true;
    return false;
}

static void emitted(sf *s, int rc, size_t n, const sl_error *err)
{
    if (rc) {
        /* The host counted and logged a refusal; memory is ours to say. */
        atomic_fetch_add(&s->n_refused, 1);
        if (rc != SL_EINVAL)
            s->host->log(s->host->ctx, "a line was not added: %s", err->msg);
        return;
    }
    s->batch_events++;
    s->batch_bytes += n;
}

/* emit_event() of a CloudEvent line (obj: its validated object, NULL: not
 * validated yet), which gets id when it has none. */
static int emit_ce(sf *s, const char *p, size_t n, const sl_json_tok *obj, const char *id,
                   size_t idl, sl_error *err)
{
    const sl_source_host *h = s->host;
    if (sl_event_add_id(&p, &n, obj, id, idl, &s->evbuf))
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    int rc = h->emit_event(h->ctx, p, n, NULL, err);
    if (s->evbuf.cap > (4u << 20))
        sl_buf_free(&s->evbuf);
    return rc;
}

/* Turns one line (or multi-line group, or piece of a long line) starting
 * at byte at of f into an event of the batch. */
static void emit_one(sf *s, sf_file *f, const char *p, size_t n, uint64_t at)
{
    const sl_source_host *h = s->host;
    sl_error err = {0};
    if (s->gen_unsaved) {
        /* The generation is on disk before an id names it (above). */
        s->gen_unsaved = false;
        sl__source_file_save_positions(s, true);
    }
    char id[ID_MAX];
    int idl =
        snprintf(id, sizeof id, "%llu-%llu-%llu-%llu", (unsigned long long)f->dev,
                 (unsigned long long)f->ino, (unsigned long long)f->gen, (unsigned long long)at);
    sl_source_meta meta = {
        .type = s->type, .source = f->src, .id = id, .id_len = (size_t)idl, .data = SL_DATA_TEXT};
    int rc;
    atomic_fetch_add(&s->n_lines, 1);
    atomic_fetch_add(&s->n_bytes, n);
    switch (s->conf->parse) {
    case SL_PARSE_TEXT:
        rc = h->emit_data(h->ctx, p, n, &meta, &err);
        break;
    case SL_PARSE_JSON: {
        sl_json_tok tok;
        /* The data sits one level inside the event, whose whole depth the
         * host (like HTTP ingest) limits to SL_EVENT_MAX_DEPTH_DEFAULT:
         * deeper JSON goes on as text (a parse error) instead of being
         * refused. */
        if (sl_json_validate(p, n, SL_EVENT_MAX_DEPTH_DEFAULT - 1, &tok, NULL) == 0) {
            if (tok.type == SL_JSON_OBJECT && memmem(p, n, "\"specversion\"", 13) &&
                has_specversion(&tok)) {
                rc = emit_ce(s, p, n, &tok, id, (size_t)idl, &err);
                break;
            }
            meta.data = SL_DATA_JSON;
        } else {
            atomic_fetch_add(&s->n_parse_errors, 1);
        }
        rc = h->emit_data(h->ctx, p, n, &meta, &err);
        break;
    }
    case SL_PARSE_LUA:
        /* The host runs the function (a config function: its job) and adds
         * what it returns. */
        meta.data = SL_DATA_PARSE;
        rc = h->emit_data(h->ctx, p, n, &meta, &err);
        if (rc == SL_SOURCE_DROPPED)
            return;
        if (rc == SL_EPARSE) {
            /* Nothing is lost: the line goes on as text. */
            atomic_fetch_add(&s->n_parse_errors, 1);
            h->log(h->ctx, "%s: %s", f->path, err.msg);
            meta.data = SL_DATA_TEXT;
            rc = h->emit_data(h->ctx, p, n, &meta, &err);
        }
        break;
    default:
        abort();
    }
    emitted(s, rc, n, &err);
}

/* Emits the pending multi-line group of f. */
void sl__source_file_group_emit(sf *s, sf_file *f)
{
    if (!f->grouping)
        return;
    emit_one(s, f, (const char *)f->group.data, f->group.len, f->group_start);
    f->grouping = false;
    f->group.len = 0;
    if (f->group.cap > 2 * s->conf->max_line + 4096)
        sl_buf_free(&f->group);
}

/* regexec() gets a NUL-terminated copy: glibc honours REG_STARTEND, but
 * sanitizers' interceptors read up to a NUL. */
static bool starts_group(sf *s, const char *p, size_t n)
{
    s->rebuf.len = 0;
    if ((n && sl_buf_append(&s->rebuf, p, n)) || sl_buf_append(&s->rebuf, "", 1))
        return false; /* out of memory: the line joins the pending event */
    regmatch_t m[1] = {{.rm_so = 0, .rm_eo = (regoff_t)n}};
    bool r = regexec(&s->re, (const char *)s->rebuf.data, 1, m, REG_STARTEND) == 0;
    if (s->rebuf.cap > 2 * s->conf->max_line + 4096)
        sl_buf_free(&s->rebuf);
    return r;
}

/* One finished line of f: bytes [f->done, end) of the file, p/n without the
 * line end. */
static void line_out(sf *s, sf_file *f, const char *p, size_t n, uint64_t end)
{
    uint64_t start = f->done;
    if (!s->has_re) {
        if (n)
            emit_one(s, f, p, n, start);
        f->done = end;
        return;
    }
    bool first = starts_group(s, p, n);
    if (f->grouping && (first || f->group.len + 1 + n > s->conf->max_line))
        sl__source_file_group_emit(s, f);
    if (f->grouping) {
        if (sl_buf_append(&f->group, "\n", 1) || sl_buf_append(&f->group, p, n)) {
            sl__source_file_group_emit(s, f); /* out of memory: the group so far */
        }
        f->group_end = end;
        f->group_ms = s->now;
    } else if (n || first) {
        f->group.len = 0;
        if (sl_buf_append(&f->group, p, n) == 0) {
            f->grouping = true;
            f->group_start = start;
            f->group_end = end;
            f->group_ms = s->now;
        }
    }
    f->done = end;
}

/* Where a restart must read f again from. */
uint64_t sl__source_file_commit_pos(const sf_file *f)
{
    return f->grouping ? f->group_start : f->done;
}

/* ---- lines ----------------------------------------------------------------------- */

/* Splits the n bytes just read at file offset base into lines. Stops early
 * when the server stops. */
void sl__source_file_consume(sf *s, sf_file *f, const char *data, size_t n, uint64_t base)
{
    const uint64_t max = s->conf->max_line;
    const char *p = data, *end = data + n;
    while (p < end && !sl__source_file_halted(s)) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t seg = (size_t)((nl ? nl : end) - p);
        uint64_t pos = base + (uint64_t)(p - data); /* file offset of p */
        if (f->skipping) {
            if (!nl)
                return;
            f->skipping = false;
            f->done = pos + seg + 1;
            p = nl + 1;
            continue;
        }
        /* The line's content, a trailing '\r' left out. */
        size_t have = f->line.len + seg;
        bool cr = nl && (seg ? p[seg - 1] == '\r'
                             : (f->line.len && f->line.data[f->line.len - 1] == '\r'));
        size_t content = have - (cr ? 1 : 0);
        if (content > max || (!nl && have > max)) {
            if (s->conf->split_long) {
                /* A piece of exactly max bytes: what is held, then from p. */
                size_t take = (size_t)(max - f->line.len);
                const char *piece = p;
                size_t plen = (size_t)max;
                if (f->line.len) {
                    if (sl_buf_append(&f->line, p, take)) {
                        take = 0; /* out of memory: what is held goes alone */
                        plen = f->line.len;
                    }
                    piece = (const char *)f->line.data;
                }
                line_out(s, f, piece, plen, f->done + plen);
                f->line.len = 0;
                f->split_cont = true;
                p += take;
            } else {
                atomic_fetch_add(&s->n_skipped, 1);
                s->host->log(s->host->ctx,
                             "%s: a line at byte %" PRIu64 " is longer than %" PRIu64
                             " bytes: skipped",
                             f->path, f->done, max);
                f->line.len = 0;
                f->split_cont = false;
                if (nl) {
                    f->done = pos + seg + 1;
                    p = nl + 1;
                } else {
                    f->skipping = true;
                    return;
                }
            }
            sl__source_file_maybe_flush(s);
            continue;
        }
        if (f->line.len && sl_buf_append(&f->line, p, seg)) {
            /* Out of memory: what is held goes on as a piece of its own. */
            line_out(s, f, (const char *)f->line.data, f->line.len, f->done + f->line.len);
            f->line.len = 0;
            f->split_cont = true;
            continue;
        }
        if (!nl) {
            if (!f->line.len && seg && sl_buf_append(&f->line, p, seg)) {
                line_out(s, f, p, seg, f->done + seg); /* no memory even for it */
                f->split_cont = true;
            }
            return;
        }
        const char *lp = f->line.len ? (const char *)f->line.data : p;
        if (content || !f->split_cont)
            line_out(s, f, lp, content, pos + seg + 1);
        else
            f->done = pos + seg + 1; /* the end of a line whose pieces were emitted */
        f->line.len = 0;
        f->split_cont = false;
        if (f->line.cap > max + 4096)
            sl_buf_free(&f->line);
        p = nl + 1;
        sl__source_file_maybe_flush(s);
    }
}

/* A gone file is done with: what it held back becomes events. */
void sl__source_file_drain_held(sf *s, sf_file *f)
{
    if (f->line.len && !f->skipping) {
        size_t n = f->line.len;
        if (n && f->line.data[n - 1] == '\r')
            n--;
        line_out(s, f, (const char *)f->line.data, n, f->off);
    }
    f->line.len = 0;
    f->skipping = false;
    sl__source_file_group_emit(s, f);
}
