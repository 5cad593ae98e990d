/*
 * core/bus/ce_binding.h — what the targets share to carry a parsed
 * CloudEvent over a protocol binding: attribute look-up by name, `{attr}`
 * templates (URLs, topics, record keys), the attributes binary mode sends as
 * headers, and the event data as binary mode sends it (CloudEvents HTTP and
 * Kafka protocol bindings). target.http and target.kafka use it; each adds
 * its own header naming and escaping.
 *
 * Nothing here keeps state: every function works on a parsed sl_event
 * (core/bus/event.h), whose tokens point into the payload, which must outlive
 * the call.
 */
#ifndef SL_CE_BINDING_H
#define SL_CE_BINDING_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/bus/event.h"

#include <stdbool.h>
#include <stddef.h>

/* Looks attribute name[0..len) up in ev: the context attributes, `lane`,
 * `partitionkey` and the extensions (not data, data_base64, nor the sluice*
 * read-back members, which the parser drops). Returns true with *tok (the
 * raw JSON value) when the event has it with a non-null value. */
bool sl_ce_attr(const sl_event *ev, const char *name, size_t len, sl_json_tok *tok);

/* The text of an attribute value: a string decoded, any other value as
 * written (numbers, booleans). Returns a malloc'ed NUL-terminated string
 * with its length in *len (the caller frees it), or NULL when out of
 * memory. */
char *sl_ce_attr_text(const sl_json_tok *tok, size_t *len);

/* Appends the text v[0..len) to out, escaped as a template's protocol needs
 * (e.g. percent-encoding for URLs). Returns 0 or SL_ENOMEM. */
typedef int sl_ce_escape_fn(sl_buf *out, const char *v, size_t len);

/* Expands template tpl for ev: every `{name}` is replaced by the text of
 * attribute name, passed through esc (NULL: as it is); the rest is copied.
 * A '{' without a closing '}' is copied as it is (sl_ce_template_check()
 * refuses it at config time). ev may be NULL when tpl has no placeholder.
 *
 * Returns 0 with a malloc'ed NUL-terminated *out (*out_len its length, may
 * be NULL; the caller frees it); SL_EINVAL when ev lacks an attribute (or is
 * NULL), with *missing and *missing_len naming it inside tpl; SL_ENOMEM. *out is
 * untouched on error. */
int sl_ce_expand(const char *tpl, const sl_event *ev, sl_ce_escape_fn *esc, char **out,
                 size_t *out_len, const char **missing, size_t *missing_len);

/* Whether tpl has a placeholder. */
bool sl_ce_has_placeholder(const char *tpl);

/* Checks template syntax: braces balanced, not nested, and every `{name}` a
 * CloudEvents attribute name ([a-z0-9]+, as the spec requires). Returns 0,
 * or SL_EINVAL with err saying what is wrong (naming tpl). */
int sl_ce_template_check(const char *tpl, sl_error *err);

/* One attribute binary mode sends as a header: name and decoded text (not
 * NUL-terminated). Returns 0 to go on, or an SL_E… code that stops the
 * walk and is returned by sl_ce_binary_attrs(). */
typedef int sl_ce_attr_fn(void *ud, const char *name, size_t nlen, const char *v, size_t vlen);

/* Calls fn for every attribute binary mode sends as a header, in a fixed
 * order: specversion, id, source, type, time, subject, dataschema, lane,
 * partitionkey, then the extensions in input order. Not datacontenttype
 * (the protocol's content-type header carries it), data, data_base64, nor
 * sluiceset/sluicepartition/sluiceoffset. Returns 0, what fn returned, or
 * SL_ENOMEM. */
int sl_ce_binary_attrs(const sl_event *ev, sl_ce_attr_fn *fn, void *ud);

/* The decoded datacontenttype of ev as a malloc'ed string (caller frees), or
 * NULL with *oom false when the event has none (*oom true: out of memory). */
char *sl_ce_content_type(const sl_event *ev, bool *oom);

/* Appends ev's data as binary mode sends it: data_base64 decoded; string
 * data with a datacontenttype that is not JSON as its text; otherwise the
 * JSON text of data (nothing when the event has no data). ctype is the
 * decoded datacontenttype, or NULL. Returns 0 or SL_ENOMEM (out may then
 * hold part of the data). */
int sl_ce_binary_data(const sl_event *ev, const char *ctype, sl_buf *out);

/* Whether binary mode sends ev's data as its JSON text as it is (then it is
 * ev->data.p[0 .. ev->data.len), nothing when ev->data.type is SL_JSON_NONE,
 * and no copy is needed); false when it must be decoded (data_base64, or a
 * string with a non-JSON ctype) by sl_ce_binary_data(). */
bool sl_ce_binary_data_is_json(const sl_event *ev, const char *ctype);

#endif
