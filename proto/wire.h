/* ddprun wire protocol: frames, fields, limits, the decoder and encoders.
 *
 * One header, past the few hundred lines of the rule: it is the whole
 * contract of the wire (every message's fields, limits and the one
 * decoder and encoder of each), read as one by the server, the agent, the
 * clients and docs/wire-protocol.md; the code behind it is split by
 * concern (wire_decode.c, wire_encode.c, wire_views.c, wire_ckpt.c, ...).
 *
 * A frame is a 12-byte header followed by a body of typed fields:
 *
 *   offset size  field
 *   0      2     magic 0x4452 ("DR"), big-endian
 *   2      1     protocol version (DR_PROTO_VERSION)
 *   3      1     message type (dr_msg_type_t)
 *   4      4     request id, big-endian; 0 on messages the server pushes
 *   8      4     body length in bytes, big-endian
 *
 * The body is a sequence of fields, each a kind byte and its payload:
 *
 *   DR_FIELD_U64   (1)  8 bytes, big-endian
 *   DR_FIELD_BYTES (2)  u32 length, then that many bytes
 *   DR_FIELD_LIST  (3)  u32 count, then count x (u32 length, bytes)
 *
 * Every message type has a fixed schema (DR_MSG_TYPES below): the number,
 * order and kind of its fields, and for byte fields which length cap
 * applies. The decoder rejects a frame that does not match its schema
 * exactly. Integers are unsigned on the wire; signed values travel in two's
 * complement and "none" is UINT64_MAX.
 *
 * Clocks. Timestamps (fields named *_us) are microseconds since the Unix
 * epoch on the sender's CLOCK_REALTIME, 0 for none. The server measures
 * each node's clock offset from them as NTP does, without a round trip of
 * its own: each side stamps what it sends (tx_us), and the agent echoes
 * the server's last stamp with the time it received it, so that four
 * timestamps cover one round trip (see clock_offset.h).
 *
 * This module never logs, never exits, and allocates only through the
 * dr_buf_t it is given.
 *
 * Long by design: this header is the protocol's documentation, kept whole.
 */
#ifndef DR_WIRE_H
#define DR_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define DR_PROTO_MAGIC 0x4452u
#define DR_PROTO_VERSION 5u
#define DR_FRAME_HDR_LEN 12u
#define DR_MAX_FIELDS 20u
#define DR_NONE UINT64_MAX
#define DR_NONCE_LEN 32u
#define DR_MAC_LEN 32u
/* The resume token of a generation: random bytes the server gives the
 * generation's nodes in their ASSIGN, and which a RESUME must carry (see
 * launcher/server/rdzv_core_resume.c). Never printed. */
#define DR_RESUME_TOKEN_LEN 16u
/* A FAILURE's message, for users: at most this many bytes. An agent whose
 * account is longer sends its last whole lines (the last lines matter
 * most); the server sizes what it writes of a failure to hold it whole. */
#define DR_FAILURE_MSG_MAX 1000u
/* A node's environment summary (agent/node_env.h: lines, each ending in
 * '\n'), as its JOIN carries it and JOB_STATUS's env records: at most this
 * many bytes. An agent whose summary is longer sends its first whole
 * lines. */
#define DR_ENV_SUMMARY_MAX 8192u
/* A JOIN's socket_ifname (the node's NCCL_SOCKET_IFNAME): at most this many
 * bytes; an agent cuts a longer value. */
#define DR_SOCKET_IFNAME_MAX 256u

/* Schema letters: u = u64; s = short string (max_str); k = store key
 * (max_key); v = store value (max_value); b = blob (max_blob);
 * K = list of keys; V = list of values; B = list of blobs, here records
 * (each list: count <= max_count, items capped as their letter's).
 *
 * X(NAME, id, schema, fields documented as "name, ...") */
#define DR_MSG_TYPES(X)                                                      \
  /* client -> server, first frame: run id, the client's host name */        \
  X(HELLO, 1, "ss", "run_id, host")                                          \
  /* server -> client: auth_required (0/1), nonce (DR_NONCE_LEN or empty), \
   * the server's clock */                                                   \
  X(WELCOME, 2, "ubu", "auth_required, nonce, tx_us")                        \
  /* client -> server: HMAC-SHA256 over the nonce, see auth.h */             \
  X(AUTH, 3, "b", "mac")                                                     \
  X(OK, 4, "", "")                                                           \
  /* code: the positive value of a dr_errno_t or errno; message: for users */ \
  X(ERROR, 5, "ub", "code, message")                                         \
  /* store; gen 0 is the job scope, n >= 1 a generation's scope */           \
  X(SET, 6, "ukv", "gen, key, value")                                        \
  X(GET, 7, "uku", "gen, key, wait_ms")                                      \
  X(VALUE, 8, "v", "value")                                                  \
  X(ADD, 9, "uku", "gen, key, delta (two's complement)")                     \
  X(INT, 10, "u", "value (two's complement)")                                \
  X(CAS, 11, "ukvv", "gen, key, expected, desired")                          \
  X(DELETE, 12, "uk", "gen, key")                                            \
  X(MULTI_GET, 13, "uKu", "gen, keys, wait_ms")                              \
  X(VALUES, 14, "V", "values")                                               \
  X(CHECK, 15, "uK", "gen, keys")                                            \
  X(BARRIER, 16, "ukuu", "gen, name, n, wait_ms")                            \
  /* rendezvous; echo_us, echo_rx_us, tx_us: a dr_clock_stamp_t */          \
  /* ckpt_port: the port of the agent's checkpoint peer (0: none);        \
   * ckpt_step: the newest complete checkpoint in its --ckpt-dir          \
   * (DR_NONE: none) */                                                      \
  /* standby_port: the port of its agent's standby rendezvous server (0:  \
   * none); term: the highest server term it has seen (0: none);           \
   * hosts_server: 1 when the server it joins runs in its ddprun; env: its \
   * node's environment summary (DR_ENV_SUMMARY_MAX); socket_ifname: its   \
   * NCCL_SOCKET_IFNAME, empty when unset (DR_SOCKET_IFNAME_MAX) */          \
  X(JOIN, 17, "sssuuubuuuuuuuubb",                                           \
    "run_id, host, addr, nproc, node_rank (DR_NONE = any), "                 \
    "master_port_offer, bootstrap_offer, echo_us, echo_rx_us, tx_us, "       \
    "ckpt_port, ckpt_step, standby_port, term, hosts_server, env, "          \
    "socket_ifname")                                                         \
  /* clock_offset_us: server minus node (two's complement), the estimate   \
   * the workers of this generation get; clock_uncertainty_us: its bound   \
   * (half a round trip), DR_NONE when the server has no estimate;         \
   * resume_token: DR_RESUME_TOKEN_LEN bytes; ckpt_step: the newest        \
   * checkpoint any node of the round holds (DR_NONE: none); peers: the    \
   * nodes this one copies its checkpoints to and restores from (peer      \
   * records, at most DR_PEERS_MAX); term: the server's; server_node: the  \
   * node rank whose ddprun hosts the server (DR_NONE: none of them);      \
   * successors: where the rendezvous moves if the server is lost (peer    \
   * records of role DR_PEER_SUCCESSOR, port: a standby server's, in node  \
   * rank order, at most DR_SUCCESSORS_MAX; none when it cannot move) */   \
  X(ASSIGN, 18, "uuuuusubuuuubuBuuB",                                        \
    "gen, node_rank, nnodes, world_size, first_rank, master_addr, "          \
    "master_port, bootstrap, restart_count, max_restarts, "                  \
    "clock_offset_us, clock_uncertainty_us, resume_token, ckpt_step, "       \
    "peers, term, server_node, successors")                                 \
  /* both ways; the server's carries only its tx_us */                       \
  X(HEARTBEAT, 19, "uuuu", "gen, echo_us, echo_rx_us, tx_us")                \
  /* message: at most DR_FAILURE_MSG_MAX bytes */                            \
  X(FAILURE, 20, "uuuuuuub",                                                 \
    "gen, rank, local_rank, pid, exit_code, signal, kind, message")          \
  X(SUCCESS, 21, "u", "gen")                                                 \
  /* server -> agents, pushed with request id 0 */                           \
  X(RESTART, 22, "uub", "gen, restart_count, reason")                        \
  X(STOP, 23, "ub", "exit_code, reason")                                     \
  /* agent -> server, after a reconnection while its workers still run the \
   * generation it was assigned: claims its place again with the token of  \
   * its ASSIGN (OK, or ERROR DR_ESTALE when the server cannot take it     \
   * back) */                                                                \
  X(RESUME, 24, "ssuuuuuuuuubu",                                             \
    "run_id, host, gen, node_rank, nnodes, world_size, nproc, "              \
    "restart_count, echo_us, echo_rx_us, tx_us, resume_token, term")         \
  /* agent -> server: this node leaves on purpose (a signal to ddprun) */   \
  X(LEAVE, 25, "uub", "gen, signal, reason")                                 \
  /* server -> the nodes waiting in a forming round, pushed: who is in and \
   * what the round still needs (see dr_round_status_t) */                   \
  X(ROUND_STATUS, 26, "uuuuuuuuBB",                                          \
    "gen, joined, min_nodes, max_nodes, needed, waited_ms, last_call_ms, "   \
    "n_missing, nodes (node records), missing (u32 node ranks)")             \
  /* agent -> server, unanswered: its workers as it sees them */             \
  X(RANKS, 27, "uB", "gen, ranks (rank records)")                            \
  /* client -> server: the job's status, answered by JOB_STATUS; flags:    \
   * DR_STATUS_STACKS, DR_STATUS_ENV */                                      \
  X(STATUS, 28, "uu", "flags, wait_ms")                                      \
  /* exit_code: DR_NONE before the job is done; envs: empty unless asked   \
   * for (DR_STATUS_ENV) */                                                  \
  X(JOB_STATUS, 29, "uuuuuuubuBBBB",                                         \
    "gen, state, restarts_used, max_restarts, min_nodes, max_nodes, "        \
    "exit_code, reason, elapsed_ms, nodes (node records), "                  \
    "ranks (rank records), stacks (stack records), envs (env records)")      \
  /* server -> agents, pushed: send the workers' stacks as STACK_DUMP id */  \
  X(STACKS, 30, "uu", "id, gen")                                             \
  /* agent -> server, unanswered: the answer to STACKS id */                 \
  X(STACK_DUMP, 31, "uB", "id, stacks (stack records)")                    \
  /* Agent to agent, the checkpoint peers (below, "Checkpoint peers"),    \
   * after the handshake above. A checkpoint follows: kind DR_CKPT_FILE or \
   * DR_CKPT_DIR; total_bytes: of its files; step: from its name; origin: \
   * the node rank that wrote it */                                        \
  X(CKPT_PUT, 32, "ssuuuu", "run_id, name, kind, total_bytes, step, origin") \
  /* one entry of a directory checkpoint: its path inside it, its kind,   \
   * the bytes of its DATA that follow (0 for a directory) */              \
  X(CKPT_ENTRY, 33, "suu", "path, kind, n_bytes")                            \
  /* the next bytes of the current file, at most DR_CKPT_CHUNK */          \
  X(CKPT_DATA, 34, "v", "bytes")                                             \
  /* the end of a checkpoint: its BLAKE2b-256 checksum */                   \
  X(CKPT_END, 35, "b", "checksum")                                           \
  /* a checkpoint wanted: by name, or by step when the name is empty      \
   * (answered by CKPT_PUT, ENTRY, DATA and END, or ERROR) */               \
  X(CKPT_GET, 36, "ssu", "run_id, name, step")

typedef enum {
#define DR__MSG_ENUM(name, id, schema, doc) DR_MSG_##name = id,
  DR_MSG_TYPES(DR__MSG_ENUM)
#undef DR__MSG_ENUM
  DR__MSG_MAX
} dr_msg_type_t;

typedef enum {
  DR_FIELD_U64 = 1,
  DR_FIELD_BYTES = 2,
  DR_FIELD_LIST = 3
} dr_field_kind_t;

/* Length caps. Every declared length is checked against these before the
 * caller reserves memory for it. max_frame_unauth replaces max_frame until
 * the peer has authenticated (or the server needs no secret). */
typedef struct {
  uint32_t max_frame_unauth;
  uint32_t max_frame;
  uint32_t max_str;
  uint32_t max_key;
  uint32_t max_value;
  uint32_t max_blob;
  uint32_t max_count;
} dr_limits_t;

/* Defaults: 4 KiB before auth, 64 MiB frames, 1 KiB strings, 4 KiB keys,
 * 32 MiB values, 64 KiB blobs, 65536 list items. */
dr_limits_t dr_limits_default(void);

/* A borrowed byte range. */
typedef struct {
  const uint8_t *p;
  uint32_t len;
} dr_bytes_t;

/* A decoded list: count items laid out as (u32 length, bytes) in p..p+len. */
typedef struct {
  uint32_t count;
  const uint8_t *p;
  uint32_t len;
} dr_list_t;

typedef struct {
  uint8_t kind; /* dr_field_kind_t */
  uint64_t u;
  dr_bytes_t b;
  dr_list_t l;
} dr_field_t;

/* A decoded frame. Byte and list fields borrow from the buffer that was
 * decoded: the message is valid while that buffer is unchanged. */
typedef struct {
  uint8_t version;
  uint8_t type;
  uint32_t req_id;
  uint32_t body_len;
  uint32_t n_fields;
  dr_field_t f[DR_MAX_FIELDS];
} dr_msg_t;

typedef enum {
  DR_DECODE_OK = 0,
  DR_DECODE_NEED_MORE = 1,
  DR_DECODE_ERROR = 2
} dr_decode_status_t;

/* Decoder state for one connection: its limits and whether the peer has
 * authenticated, which selects the frame cap. */
typedef struct {
  dr_limits_t lim;
  int authed;
} dr_decoder_t;

void dr_decoder_init(dr_decoder_t *d, const dr_limits_t *lim);

/* Decodes one frame from buf[0..len).
 *  OK:        *msg is filled, *consumed is the frame's size.
 *  NEED_MORE: *need is the number of bytes the frame needs in total (header
 *             plus body); reserve that much, read, and call again. Lengths
 *             in the header have been capped before *need is reported.
 *  ERROR:     *err says why (DR_EMAGIC, DR_EVERSION, DR_ETYPE, DR_EFIELD,
 *             DR_ETOOBIG, DR_ETRUNC, DR_ETRAILING). The stream cannot be
 *             resynchronised: close the connection.
 * Never allocates. */
dr_decode_status_t dr_decode(const dr_decoder_t *d, const uint8_t *buf,
                             size_t len, dr_msg_t *msg, size_t *consumed,
                             size_t *need, int *err);

/* Iterates a decoded list. *pos starts at 0. Returns 1 and fills *item, or 0
 * at the end. The list was validated when decoded. */
int dr_list_next(const dr_list_t *l, uint32_t *pos, dr_bytes_t *item);

/* Schema string of a type ("ukv"), or NULL for an unknown type. */
const char *dr_msg_schema(uint8_t type);
/* Name of a type ("SET"), or "UNKNOWN". */
const char *dr_msg_name(uint8_t type);

/* ---- encoding -------------------------------------------------------- */

/* A growable output buffer. Zero-initialise, or dr_buf_init(). Free with
 * dr_buf_free(). alloc may be NULL (realloc is used); tests inject one to
 * count or fail allocations. */
typedef void *(*dr_realloc_fn)(void *ctx, void *ptr, size_t n_bytes);
typedef struct {
  uint8_t *data;
  size_t len;
  size_t cap;
  dr_realloc_fn alloc;
  void *alloc_ctx;
  int err; /* first error of a failed encode, sticky until reset */
} dr_buf_t;

void dr_buf_init(dr_buf_t *b);
void dr_buf_reset(dr_buf_t *b); /* len = 0, err = 0, memory kept */
void dr_buf_free(dr_buf_t *b);
int dr_buf_reserve(dr_buf_t *b, size_t n_bytes); /* room for len+n_bytes */
int dr_buf_append(dr_buf_t *b, const void *p, size_t n_bytes);

/* Makes a dr_bytes_t from a NUL-terminated string (NULL gives empty). */
dr_bytes_t dr_str(const char *s);

/* The typed encoders append one complete frame to *b and return 0 or a
 * negative code (-ENOMEM, DR_ETOOBIG when a field exceeds 4 GiB). Lists are
 * passed as an array of dr_bytes_t. */
int dr_enc_hello(dr_buf_t *b, uint32_t req, dr_bytes_t run_id, dr_bytes_t host);
int dr_enc_welcome(dr_buf_t *b, uint32_t req, int auth_required,
                   dr_bytes_t nonce, uint64_t tx_us);
int dr_enc_auth(dr_buf_t *b, uint32_t req, dr_bytes_t mac);
int dr_enc_ok(dr_buf_t *b, uint32_t req);
int dr_enc_error(dr_buf_t *b, uint32_t req, int code, dr_bytes_t message);
int dr_enc_set(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t value);
int dr_enc_get(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               uint64_t wait_ms);
int dr_enc_value(dr_buf_t *b, uint32_t req, dr_bytes_t value);
int dr_enc_add(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               int64_t delta);
int dr_enc_int(dr_buf_t *b, uint32_t req, int64_t value);
int dr_enc_cas(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key,
               dr_bytes_t expected, dr_bytes_t desired);
int dr_enc_delete(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t key);
int dr_enc_multi_get(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_bytes_t *keys, size_t n_keys, uint64_t wait_ms);
int dr_enc_values(dr_buf_t *b, uint32_t req, const dr_bytes_t *values,
                  size_t n_values);
int dr_enc_check(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_bytes_t *keys, size_t n_keys);
int dr_enc_barrier(dr_buf_t *b, uint32_t req, uint64_t gen, dr_bytes_t name,
                   uint64_t n, uint64_t wait_ms);

/* The clock readings an agent's JOIN, RESUME and HEARTBEAT carry (the
 * server's HEARTBEAT: tx_us only). All in microseconds since the epoch on
 * the clock of whoever stamped them; 0 = none, so that a zeroed stamp
 * carries no measurement. */
typedef struct {
  uint64_t echo_us;    /* the peer's last tx_us received, echoed once */
  uint64_t echo_rx_us; /* when it was received, on the sender's clock */
  uint64_t tx_us;      /* the sender's clock as it sends this message */
} dr_clock_stamp_t;

typedef struct {
  dr_bytes_t run_id;
  dr_bytes_t host;      /* the node's host name, for messages and ordering */
  dr_bytes_t addr;      /* address workers use to reach it; empty = peer's */
  uint32_t nproc;       /* workers on this node */
  uint64_t node_rank;   /* requested node rank, DR_NONE for any */
  uint32_t master_port_offer; /* a port free on this node, 0 = none */
  dr_bytes_t bootstrap_offer; /* used as the bootstrap if this is node 0 */
  dr_clock_stamp_t clock;
  uint32_t ckpt_port;   /* its agent's checkpoint peer, 0 = none */
  uint64_t ckpt_step;   /* newest complete checkpoint it holds, DR_NONE */
  uint32_t standby_port; /* its standby rendezvous server, 0 = none */
  uint64_t term;        /* the highest server term it has seen, 0: none */
  uint32_t hosts_server; /* 1: the server runs in this node's ddprun */
  dr_bytes_t env;       /* its environment summary, for ddprun status
                           --env; at most DR_ENV_SUMMARY_MAX bytes */
  dr_bytes_t socket_ifname; /* its NCCL_SOCKET_IFNAME, empty when unset;
                               at most DR_SOCKET_IFNAME_MAX bytes */
} dr_join_t;

typedef struct {
  uint64_t gen;
  uint32_t node_rank;
  uint32_t nnodes;
  uint32_t world_size;
  uint32_t first_rank; /* global rank of this node's local rank 0 */
  dr_bytes_t master_addr;
  uint32_t master_port;
  dr_bytes_t bootstrap; /* per generation: NCCL unique id or CPU data */
  uint32_t restart_count;
  uint32_t max_restarts;
  int64_t clock_offset_us;       /* server's clock minus this node's */
  uint64_t clock_uncertainty_us; /* its bound; DR_NONE: not measured */
  uint8_t resume_token[DR_RESUME_TOKEN_LEN]; /* for a RESUME of gen */
  uint64_t ckpt_step;   /* newest checkpoint of the round, DR_NONE: none */
  /* Encoding: n_peer_recs records at peer_recs. Decoded: the list, read
   * with dr_peer_rec_next(). */
  const struct dr_peer_rec *peer_recs;
  size_t n_peer_recs;
  dr_list_t peers;
  uint64_t term;        /* the server's term (1: the job's first server) */
  uint32_t server_node; /* node rank hosting the server, DR_NO_RANK: none */
  /* Where the rendezvous moves (as peers above: encoding from succ_recs,
   * decoded into the list successors). */
  const struct dr_peer_rec *succ_recs;
  size_t n_succ_recs;
  dr_list_t successors;
} dr_assign_t;

/* How a worker failed, as its agent saw it. X(NAME, value, doc). */
#define DR_FAIL_KINDS(X)                                                     \
  X(EXIT, 0, "exited with a code other than 0")                              \
  X(SIGNAL, 1, "was killed by a signal")                                     \
  X(HANG, 2, "made no progress for --hang-timeout: the agent's verdict")     \
  X(START, 3, "could not be started (exec or fork failed)")                  \
  X(HANG_WAIT, 4, "made no progress for --hang-timeout while it waited, "   \
                  "with no culprit on its node: the agent's verdict, which " \
                  "may echo a culprit on another node")

typedef enum {
#define DR__FAIL_ENUM(name, v, doc) DR_FAIL_##name = v,
  DR_FAIL_KINDS(DR__FAIL_ENUM)
#undef DR__FAIL_ENUM
  DR__FAIL_KIND_N
} dr_fail_kind_t;

/* "exit", "signal", "hang", "start", "hang_wait". */
const char *dr_fail_kind_name(dr_fail_kind_t k);

typedef struct {
  uint64_t gen;
  uint32_t rank;
  uint32_t local_rank;
  uint32_t pid;
  int32_t exit_code; /* -1 when killed by a signal */
  int32_t signal;    /* 0 when it exited */
  dr_fail_kind_t kind;
  dr_bytes_t message;
} dr_failure_t;

typedef struct {
  dr_bytes_t run_id;
  dr_bytes_t host;
  uint64_t gen;          /* the generation its workers run */
  uint32_t node_rank;
  uint32_t nnodes;
  uint32_t world_size;
  uint32_t nproc;
  uint32_t restart_count;
  dr_clock_stamp_t clock;
  uint8_t resume_token[DR_RESUME_TOKEN_LEN]; /* from gen's ASSIGN */
  uint64_t term;         /* the term of the server that assigned gen */
} dr_resume_t;

typedef struct {
  uint64_t gen;
  uint32_t signal;       /* the signal ddprun received, 0 for none */
  dr_bytes_t reason;
} dr_leave_t;

int dr_enc_join(dr_buf_t *b, uint32_t req, const dr_join_t *j);
int dr_enc_resume(dr_buf_t *b, uint32_t req, const dr_resume_t *r);
int dr_enc_leave(dr_buf_t *b, uint32_t req, const dr_leave_t *l);
int dr_enc_assign(dr_buf_t *b, uint32_t req, const dr_assign_t *a);
/* clock NULL: none (all zero). */
int dr_enc_heartbeat(dr_buf_t *b, uint32_t req, uint64_t gen,
                     const dr_clock_stamp_t *clock);
int dr_enc_failure(dr_buf_t *b, uint32_t req, const dr_failure_t *f);
int dr_enc_success(dr_buf_t *b, uint32_t req, uint64_t gen);
int dr_enc_restart(dr_buf_t *b, uint32_t req, uint64_t gen,
                   uint32_t restart_count, dr_bytes_t reason);
int dr_enc_stop(dr_buf_t *b, uint32_t req, int exit_code, dr_bytes_t reason);

typedef struct {
  dr_bytes_t run_id;
  dr_bytes_t host;
} dr_hello_t;

typedef struct {
  int auth_required;
  dr_bytes_t nonce; /* DR_NONCE_LEN bytes when auth_required */
  uint64_t tx_us;   /* the server's clock as it sent the WELCOME */
} dr_welcome_t;

typedef struct {
  uint64_t gen;
  dr_clock_stamp_t clock;
} dr_heartbeat_t;

typedef struct {
  dr_bytes_t mac;
} dr_auth_t;

typedef struct {
  int code;           /* the local code: negative, as dr_strerror() takes */
  dr_bytes_t message;
} dr_error_t;

/* Every store request in one view: the fields its type has are set, the
 * others zero. */
typedef struct {
  uint64_t gen;
  dr_bytes_t key;      /* SET GET ADD CAS DELETE; BARRIER: its name */
  dr_bytes_t value;    /* SET; CAS: the desired value */
  dr_bytes_t expected; /* CAS */
  dr_list_t keys;      /* MULTI_GET CHECK */
  uint64_t wait_ms;    /* GET MULTI_GET BARRIER */
  int64_t delta;       /* ADD */
  uint64_t n;          /* BARRIER: how many meet */
} dr_store_req_t;

typedef struct {
  uint64_t gen;
  uint32_t restart_count;
  dr_bytes_t reason;
} dr_restart_t;

typedef struct {
  int exit_code;
  dr_bytes_t reason;
} dr_stop_t;

/* Typed views of decoded messages (wire_views.c): borrowed like the
 * message. Each returns DR_EUNEXPECTED when msg is of another type,
 * DR_EBADARG when an integer does not fit its field (or a JOIN's env or
 * socket_ifname is over its bound). */
int dr_msg_hello(const dr_msg_t *msg, dr_hello_t *out);
int dr_msg_welcome(const dr_msg_t *msg, dr_welcome_t *out);
int dr_msg_auth(const dr_msg_t *msg, dr_auth_t *out);
int dr_msg_error(const dr_msg_t *msg, dr_error_t *out);
/* SET GET ADD CAS DELETE MULTI_GET CHECK BARRIER. */
int dr_msg_store_req(const dr_msg_t *msg, dr_store_req_t *out);
int dr_msg_value(const dr_msg_t *msg, dr_bytes_t *value);
int dr_msg_int(const dr_msg_t *msg, int64_t *value);
int dr_msg_values(const dr_msg_t *msg, dr_list_t *values);
int dr_msg_heartbeat(const dr_msg_t *msg, dr_heartbeat_t *out);
int dr_msg_success(const dr_msg_t *msg, uint64_t *gen);
int dr_msg_restart(const dr_msg_t *msg, dr_restart_t *out);
int dr_msg_stop(const dr_msg_t *msg, dr_stop_t *out);
int dr_msg_join(const dr_msg_t *msg, dr_join_t *out);
int dr_msg_assign(const dr_msg_t *msg, dr_assign_t *out);
int dr_msg_failure(const dr_msg_t *msg, dr_failure_t *out);
int dr_msg_resume(const dr_msg_t *msg, dr_resume_t *out);
int dr_msg_leave(const dr_msg_t *msg, dr_leave_t *out);

/* ---- the job's status: the round that forms, the ranks, their stacks --- */

/* Records. The lists of ROUND_STATUS, RANKS, JOB_STATUS and STACK_DUMP
 * (schema letter B) hold one record per item, its integers big-endian at
 * fixed offsets, then for some a text that fills the rest of the item:
 *
 *   node  (32 + host)  node_rank u32, nproc u32, first_rank u32, state u32,
 *                      hb_age_ms u64, report_age_ms u64, host
 *   rank  (100)        rank u32, local_rank u32, node_rank u32, pid u32,
 *                      state u32, exit_code u32, signal u32, step u64,
 *                      step_age_ms u64, rate_milli u64, rss_bytes u64,
 *                      rss_peak_bytes u64, cpu_milli u32,
 *                      gpu_mem_bytes u64, gpu_util u32,
 *                      gpu_used_bytes u64, gpu_total_bytes u64
 *   stack (16 + text)  rank u32, node_rank u32, pid u32, code u32, text
 *   missing (4)        node_rank u32
 *   peer  (24 + addr)  node_rank u32, port u32, roles u32, 0 u32,
 *                      ckpt_step u64, addr (ASSIGN's peers)
 *   env   (8 + text)   node_rank u32, 0 u32, text (JOB_STATUS's envs: one
 *                      per node record, in their order, with its
 *                      node_rank; the node's environment summary, at most
 *                      DR_ENV_SUMMARY_MAX bytes, empty when the server has
 *                      none: it took the job over since the node joined)
 *
 * The views check every record of a message (its length, its states, the
 * host's length); the iterators below then only read them. */
#define DR_NODE_REC_LEN 32u
#define DR_PEER_REC_LEN 24u
#define DR_RANK_REC_LEN 100u
#define DR_STACK_REC_LEN 16u
#define DR_ENV_REC_LEN 8u
#define DR_HOST_MAX 255u
#define DR_NO_RANK UINT32_MAX /* a node rank not assigned (yet) */
#define DR_NO_U32 UINT32_MAX  /* a u32 figure of a record not known */

/* X(NAME, value, name) */
#define DR_JOB_STATES(X)                                                     \
  X(FORMING, 0, "forming")                                                   \
  X(RUNNING, 1, "running")                                                   \
  X(DONE, 2, "done")

/* What a node is to the job. */
#define DR_NODE_STATES(X)                                                    \
  X(FORMING, 0, "joined")     /* in the forming round, waiting for it */     \
  X(RUNNING, 1, "running")    /* assigned its place in the running round */  \
  X(WAITING, 2, "waiting")    /* joined while a round runs: in the next */   \
  X(DETACHED, 3, "detached")  /* its place kept after a server restart, */   \
                              /* not yet claimed by a RESUME */              \
  X(SUCCEEDED, 4, "succeeded") /* every worker of it exited 0 */

/* What a worker is, as its agent sees it. */
#define DR_RANK_STATES(X)                                                    \
  X(STARTING, 0, "starting")  /* not started yet */                         \
  X(RUNNING, 1, "running")                                                   \
  X(STOPPED, 2, "stopped")    /* stopped by a signal or a debugger (T) */    \
  X(STOPPING, 3, "stopping")  /* its agent is stopping the group */          \
  X(EXITED, 4, "exited")      /* exit_code says how */                       \
  X(KILLED, 5, "killed")      /* by signal */

typedef enum {
#define DR__JS_ENUM(name, v, str) DR_JS_##name = v,
  DR_JOB_STATES(DR__JS_ENUM)
#undef DR__JS_ENUM
  DR__JS_N
} dr_job_st_t;

typedef enum {
#define DR__NS_ENUM(name, v, str) DR_NS_##name = v,
  DR_NODE_STATES(DR__NS_ENUM)
#undef DR__NS_ENUM
  DR__NS_N
} dr_node_st_t;

typedef enum {
#define DR__RS_ENUM(name, v, str) DR_RS_##name = v,
  DR_RANK_STATES(DR__RS_ENUM)
#undef DR__RS_ENUM
  DR__RS_N
} dr_rank_st_t;

/* "forming", "joined", "running", ...; "unknown" out of range. */
const char *dr_job_state_name(uint32_t st);
const char *dr_node_state_name(uint32_t st);
const char *dr_rank_state_name(uint32_t st);

typedef struct {
  uint32_t node_rank;     /* DR_NO_RANK: none; forming: the one requested */
  uint32_t nproc;
  uint32_t first_rank;    /* DR_NO_RANK before the round runs */
  uint32_t state;         /* dr_node_st_t */
  uint64_t hb_age_ms;     /* since the node was last heard; DR_NONE: gone */
  uint64_t report_age_ms; /* since its last RANKS; DR_NONE: none */
  dr_bytes_t host;        /* at most DR_HOST_MAX bytes */
} dr_node_rec_t;

typedef struct {
  uint32_t rank, local_rank, node_rank, pid; /* pid 0: not started */
  uint32_t state;       /* dr_rank_st_t */
  int32_t exit_code;    /* EXITED */
  uint32_t signal;      /* KILLED */
  uint64_t step;        /* its last progress report; DR_NONE: none */
  uint64_t step_age_ms; /* since that step was first seen; DR_NONE: none */
  uint64_t rate_milli;  /* steps per 1000 s, lately; DR_NONE: unknown */
  /* Its health, as its agent samples it (protocol 5): the resident bytes of
   * its process group (the rank and every descendant still in its group)
   * now and at most since it started, DR_NONE unknown (not running, not
   * sampled yet); the group's CPU use over the last seconds in
   * thousandths of one CPU, DR_NO_U32 unknown. */
  uint64_t rss_bytes, rss_peak_bytes;
  uint32_t cpu_milli;
  /* Through NVML, where the node has it: the GPU memory its group's
   * processes use, summed (DR_NONE: unknown, or no process of it holds a
   * GPU context); the utilisation of the GPU they run on, percent
   * (DR_NO_U32: unknown), and that GPU's memory in use by every process
   * and its total (DR_NONE: unknown). */
  uint64_t gpu_mem_bytes;
  uint32_t gpu_util;
  uint64_t gpu_used_bytes, gpu_total_bytes;
} dr_rank_rec_t;

typedef struct {
  uint32_t rank, node_rank, pid;
  uint32_t code;   /* 0, or the positive code of why there is no stack */
  dr_bytes_t text; /* the stack, or why there is none */
} dr_stack_rec_t;

typedef struct {
  uint32_t node_rank; /* the node record's at the same place */
  dr_bytes_t text;    /* its summary's lines; empty: not known */
} dr_env_rec_t;

/* ROUND_STATUS: the forming round of generation gen. needed: how many
 * more nodes it needs before it can complete (to MIN, and to every node
 * rank requested); waited_ms: since its first node joined; last_call_ms:
 * until it completes with the nodes it has (DR_NONE: not armed, too few);
 * nodes: the first DR_ROUND_NODES_MAX to have joined; missing: requested
 * node ranks below what the round needs that no node holds, when every
 * node joined with one (static ranks), the first DR_ROUND_MISSING_MAX of
 * n_missing. Small, since every waiting node gets one. */
#define DR_ROUND_NODES_MAX 16u
#define DR_ROUND_MISSING_MAX 64u
typedef struct {
  uint64_t gen;
  uint32_t joined, min_nodes, max_nodes, needed;
  uint64_t waited_ms, last_call_ms;
  uint32_t n_missing;
  dr_list_t nodes;   /* node records: dr_node_rec_next() */
  dr_list_t missing; /* u32 node ranks: dr_rank_u32_next() */
} dr_round_status_t;

/* RANKS: gen, and the rank records of the node's workers. */
typedef struct {
  uint64_t gen;
  dr_list_t ranks;
} dr_ranks_t;

/* STATUS flags */
#define DR_STATUS_STACKS 1u
/* Every node's environment summary in JOB_STATUS's envs: asked for, since
 * at 12,500 nodes it is megabytes where the rest is small. */
#define DR_STATUS_ENV 2u

typedef struct {
  uint32_t flags;   /* DR_STATUS_* */
  uint64_t wait_ms; /* for the stacks */
} dr_status_req_t;

typedef struct {
  uint64_t gen;
  uint32_t state; /* dr_job_st_t */
  uint32_t restarts_used, max_restarts, min_nodes, max_nodes;
  uint64_t exit_code; /* DR_NONE: not done */
  dr_bytes_t reason; /* why the job ended; empty before */
  uint64_t elapsed_ms; /* in the current state: since the round began to
                          form, ran, or the job ended */
  dr_list_t nodes, ranks, stacks, envs;
} dr_job_status_t;

typedef struct {
  uint64_t id;
  uint64_t gen;
} dr_stacks_req_t;

typedef struct {
  uint64_t id;
  dr_list_t stacks;
} dr_stack_dump_t;

/* Encoders: the records are given as arrays of structs. */
int dr_enc_round_status(dr_buf_t *b, uint32_t req, const dr_round_status_t *st,
                        const dr_node_rec_t *nodes, size_t n_nodes,
                        const uint32_t *missing, size_t n_missing);
int dr_enc_ranks(dr_buf_t *b, uint32_t req, uint64_t gen,
                 const dr_rank_rec_t *ranks, size_t n_ranks);
int dr_enc_status(dr_buf_t *b, uint32_t req, uint32_t flags,
                  uint64_t wait_ms);
int dr_enc_job_status(dr_buf_t *b, uint32_t req, const dr_job_status_t *js,
                      const dr_node_rec_t *nodes, size_t n_nodes,
                      const dr_rank_rec_t *ranks, size_t n_ranks,
                      const dr_stack_rec_t *stacks, size_t n_stacks,
                      const dr_env_rec_t *envs, size_t n_envs);
int dr_enc_stacks(dr_buf_t *b, uint32_t req, uint64_t id, uint64_t gen);
int dr_enc_stack_dump(dr_buf_t *b, uint32_t req, uint64_t id,
                      const dr_stack_rec_t *stacks, size_t n_stacks);

/* Views: as the others, and DR_EBADARG for a record of the wrong length,
 * a state out of range, a host over DR_HOST_MAX, or envs that are neither
 * empty nor one per node record with its node_rank. The lists of the view
 * (js->nodes, ...) are the ones to iterate. */
int dr_msg_round_status(const dr_msg_t *msg, dr_round_status_t *out);
int dr_msg_ranks(const dr_msg_t *msg, dr_ranks_t *out);
int dr_msg_status(const dr_msg_t *msg, dr_status_req_t *out);
int dr_msg_job_status(const dr_msg_t *msg, dr_job_status_t *out);
int dr_msg_stacks(const dr_msg_t *msg, dr_stacks_req_t *out);
int dr_msg_stack_dump(const dr_msg_t *msg, dr_stack_dump_t *out);

/* A node's peer for its checkpoints, in its ASSIGN. roles: DR_PEER_*. */
#define DR_PEER_REPLICA 1u /* one of the next nodes by node rank: this
                              node's new checkpoints are copied there */
#define DR_PEER_HOLDER 2u  /* holds the round's newest checkpoint: a node
                              without it restores it from there */
#define DR_PEERS_MAX 12u   /* records in one ASSIGN at most */
#define DR_PEER_SUCCESSOR 4u /* in successors: a node whose agent holds a
                                standby rendezvous server at port */
#define DR_SUCCESSORS_MAX 8u /* successors in one ASSIGN at most */
typedef struct dr_peer_rec {
  uint32_t node_rank;
  uint32_t port;       /* its agent's checkpoint port */
  uint32_t roles;
  uint64_t ckpt_step;  /* the newest complete checkpoint it holds, DR_NONE */
  dr_bytes_t addr;     /* at most DR_HOST_MAX bytes */
} dr_peer_rec_t;

/* Iterate the record lists of a checked view, as dr_list_next(): 1 and
 * *out (borrowed like the message), or 0 at the end. */
int dr_node_rec_next(const dr_list_t *l, uint32_t *pos, dr_node_rec_t *out);
int dr_rank_rec_next(const dr_list_t *l, uint32_t *pos, dr_rank_rec_t *out);
int dr_stack_rec_next(const dr_list_t *l, uint32_t *pos, dr_stack_rec_t *out);
int dr_env_rec_next(const dr_list_t *l, uint32_t *pos, dr_env_rec_t *out);
int dr_rank_u32_next(const dr_list_t *l, uint32_t *pos, uint32_t *out);
int dr_peer_rec_next(const dr_list_t *l, uint32_t *pos, dr_peer_rec_t *out);
/* 0 when every item of l is a peer record and there are at most
 * DR_PEERS_MAX, else DR_EBADARG (dr_msg_assign's check). */
int dr_peer_list_check(const dr_list_t *l);

/* ---- checkpoint peers ----------------------------------------------------
 *
 * Agents copy checkpoints to each other over connections of their own
 * (agent/ckpt_peer.h), with the handshake of the rendezvous (HELLO,
 * WELCOME, AUTH when the job has a secret). A checkpoint travels as
 *   CKPT_PUT, then for a directory one CKPT_ENTRY per entry (a directory
 *   before what it holds), each file's bytes in CKPT_DATA frames of at
 *   most DR_CKPT_CHUNK bytes, then CKPT_END
 * and its checksum is BLAKE2b-256 (libsodium's crypto_generichash, no
 * key) over the files' bytes in that order, each entry of a directory
 * preceded by its path, a NUL, its kind (one byte) and its n_bytes (8
 * bytes, big-endian): a file checkpoint's checksum is that of its bytes
 * (b2sum -l 256). docs/wire-protocol.md has the exchanges. */
#define DR_CKPT_FILE 1u
#define DR_CKPT_DIR 2u
#define DR_CKPT_CHUNK (1u << 20)
#define DR_CKPT_SUM_LEN 32u

typedef struct {
  dr_bytes_t run_id;
  dr_bytes_t name;      /* its name in the checkpoint directory */
  uint32_t kind;        /* DR_CKPT_FILE or DR_CKPT_DIR */
  uint64_t total_bytes; /* of its files' contents */
  uint64_t step;
  uint32_t origin;      /* the node rank that wrote it */
} dr_ckpt_put_t;

typedef struct {
  dr_bytes_t path;      /* relative to the checkpoint, '/'-separated */
  uint32_t kind;        /* DR_CKPT_FILE or DR_CKPT_DIR */
  uint64_t n_bytes;     /* a file's; 0 for a directory */
} dr_ckpt_entry_t;

typedef struct {
  dr_bytes_t run_id;
  dr_bytes_t name;      /* empty: the checkpoint of step */
  uint64_t step;        /* DR_NONE with a name */
} dr_ckpt_get_t;

/* Encoders; DATA over DR_CKPT_CHUNK and END of another length than
 * DR_CKPT_SUM_LEN are DR_EBADARG, as the views below refuse them. */
int dr_enc_ckpt_put(dr_buf_t *b, uint32_t req, const dr_ckpt_put_t *p);
int dr_enc_ckpt_entry(dr_buf_t *b, uint32_t req, const dr_ckpt_entry_t *e);
int dr_enc_ckpt_data(dr_buf_t *b, uint32_t req, dr_bytes_t bytes);
int dr_enc_ckpt_end(dr_buf_t *b, uint32_t req, dr_bytes_t checksum);
int dr_enc_ckpt_get(dr_buf_t *b, uint32_t req, const dr_ckpt_get_t *g);

/* Views, as the others: DR_EUNEXPECTED for another type; DR_EBADARG for a
 * kind that is neither, an origin over 32 bits, a directory entry with
 * bytes, DATA over DR_CKPT_CHUNK, a checksum of another length. */
int dr_msg_ckpt_put(const dr_msg_t *msg, dr_ckpt_put_t *out);
int dr_msg_ckpt_entry(const dr_msg_t *msg, dr_ckpt_entry_t *out);
int dr_msg_ckpt_data(const dr_msg_t *msg, dr_bytes_t *bytes);
int dr_msg_ckpt_end(const dr_msg_t *msg, dr_bytes_t *checksum);
int dr_msg_ckpt_get(const dr_msg_t *msg, dr_ckpt_get_t *out);

#endif /* DR_WIRE_H */
