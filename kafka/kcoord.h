/*
 * kafka/kcoord.h — the group coordinator's state, shared by kcoord.c
 * (membership: Join/Sync/Heartbeat/Leave, the rebalance state machine, the
 * timer, Describe/ListGroups, FindCoordinator) and koffsets.c (committed
 * offsets: OffsetCommit/OffsetFetch, their files under DATA/kafka/groups/,
 * GET /v1/groups). Not for use outside kafka/.
 *
 * The state machine is Kafka's (GroupCoordinator, KIP-345/394):
 *
 *   Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶
 *   CompletingRebalance ──leader's SyncGroup──▶ Stable
 *
 * and back to PreparingRebalance when a member joins, leaves, changes its
 * protocols or misses its session timeout. JoinGroup and a follower's
 * SyncGroup are parked (kpark) until the state moves; the thread that moves
 * it writes their responses and posts them. One mutex guards all of it:
 * group traffic is a few requests per member per heartbeat interval.
 */
#ifndef SL_KCOORD_H
#define SL_KCOORD_H

#include "kafka/kafka_internal.h"

#include <pthread.h>

enum { KG_EMPTY, KG_PREPARING, KG_COMPLETING, KG_STABLE };

/* How long a first rebalance of an empty group waits for more members
 * (Kafka's group.initial.rebalance.delay.ms, shorter: sluice runs in tests
 * and on laptops), and the session timeouts a member may ask for. */
#define KCOORD_INITIAL_DELAY_MS 300
#define KCOORD_MIN_SESSION_MS 1000
#define KCOORD_MAX_SESSION_MS 1800000
#define KCOORD_MAX_MEMBERS 1000        /* GROUP_MAX_SIZE_REACHED beyond */
#define KCOORD_METADATA_MAX 4096       /* OFFSET_METADATA_TOO_LARGE beyond */
#define KCOORD_GROUP_ID_MAX 255        /* INVALID_GROUP_ID beyond (and empty) */
#define KCOORD_MEMBER_ID_MAX 512

typedef struct kmember kmember;

/* A parked JoinGroup or SyncGroup. */
typedef struct kpark {
    sl_kreq *r;
    kmember *m;   /* while !done */
    bool sync;    /* a SyncGroup (else a JoinGroup) */
    bool done;    /* answered (posted) or cancelled */
} kpark;

typedef struct kproto {
    char *name;
    uint8_t *meta;
    int32_t len;
} kproto;

struct kmember {
    char *id;
    char *instance; /* group.instance.id (static membership), or NULL */
    char client_id[SL_KAFKA_CLIENT_ID_MAX + 1];
    char host[64];
    int32_t session_ms, rebalance_ms;
    kproto *protos;
    int32_t nprotos;
    uint8_t *assign; /* from the leader's SyncGroup */
    int32_t assign_len;
    int64_t seen_ms; /* last request, monotonic */
    kpark *join, *sync;
    bool joined;  /* rejoined in the current rebalance */
    bool pending; /* told MEMBER_ID_REQUIRED, not joined yet */
};

typedef struct koff {
    char *topic;
    int32_t part;
    int32_t epoch;
    int64_t offset;
    char *meta; /* or NULL */
} koff;

typedef struct kgroup {
    char *id;
    int state;
    int32_t gen;
    char *ptype;  /* protocol type ("consumer"), NULL until a member joined */
    char *proto;  /* the chosen protocol, NULL while none */
    char *leader; /* member id */
    kmember **m;
    size_t nm, mcap;
    int64_t deadline_ms, delay_ms; /* rebalance: give up on, and wait at least until */
    koff *off; /* sorted by (topic, part) */
    size_t noff, offcap;
} kgroup;

typedef struct sl_kcoord {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t timer;
    bool timer_on, stop;
    kgroup **g;
    size_t ng, gcap;
    char dir[4200]; /* DATA/kafka/groups */
} sl_kcoord;

/* kcoord.c: the group named id, created (Empty) when create; NULL when
 * absent or out of memory. Under c->mu. */
kgroup *sl__kcoord_group(sl_kcoord *c, const char *id, bool create);
kmember *sl__kcoord_member(kgroup *g, const char *id);
/* Members that joined (pending ones excluded). */
size_t sl__kcoord_active(const kgroup *g);
const char *sl__kcoord_state_name(int state);
/* A group id from s into out: not null, not empty, UTF-8 (it is a JSON
 * string in its offsets file and in GET /v1/groups), under cap. */
bool sl__kcoord_group_id(sl_kstr s, char *out, size_t cap);
/* The "group_id, generation_id, member_id[, group_instance_id]" that
 * SyncGroup, Heartbeat and OffsetCommit begin with (the instance id from
 * version instance_from on; it is not used). */
typedef struct kmember_ref {
    char group[KCOORD_GROUP_ID_MAX + 1];
    char member[KCOORD_MEMBER_ID_MAX + 1];
    int32_t gen;
    bool group_ok, member_ok; /* group: sl__kcoord_group_id(); member: fits */
} kmember_ref;
void sl__kcoord_read_ref(sl_kr *b, int16_t version, int16_t instance_from, kmember_ref *out);

/* Whether r may use groups: with keys, one that reads some set. */
bool sl__kcoord_allowed(const sl_kreq *r);

/* koffsets.c: loads DATA/kafka/groups/ into c (groups Empty, offsets
 * only), frees a group's offsets. */
int sl__koffsets_load(sl_kcoord *c, sl_error *err);
void sl__koffsets_free(kgroup *g);

#endif
