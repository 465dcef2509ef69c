/* The Kafka formats the native lane reads and writes itself: the Fetch v17/v18 exchange of
 * the voters' shape (the follower's reading of answers and writing of fetches, the leader's
 * reading of fetches and writing of answers), record batch v2 with its CRC-32C, and the scan
 * of an append at a log's end (scan_appended, which the node hands its log). Each is byte
 * for byte what the Python path writes or field for field what it reads (kraft.server.fetch_fast,
 * kraft.records.batch, kraft.storage.log). */
#include "lane.h"

/* ------------------------------------------------------------------ a leader's answer, as bytes */

/* The follower's lane reads the leader's answers itself. This is its reading of a
 * Fetch v17/v18 response frame (header v1 and body, no size prefix): the plain answer of the
 * voters' shape (kraft.server.fetch_fast's), and nothing else. It accepts a frame only when:
 *   - it answers `correlation_id`, with no header tags and no top-level error;
 *   - one topic (the metadata topic id), one partition (0), with no error;
 *   - no aborted transactions, no divergence and no snapshot id named, no unknown tag, no
 *     leader endpoints;
 *   - every record batch is whole, of magic 2, with a possible header, not a control batch, and
 *     its CRC-32C checks out.
 * Anything else is handed over (0): the general path decodes it, and reports what is wrong. */

static uint32_t crc_table[256];

static uint32_t crc32c_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                             size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
static int crc_hw;
#endif

/* The software CRC's table, and whether the CPU has the CRC32 instruction (once, at import). */
void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* CRC-32C (Castagnoli) of `n` bytes, as record batch v2 stores it. */
uint32_t crc32c(const uint8_t *p, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw)
        return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_soft(0xFFFFFFFFu, p, n);
}

/* An unsigned varint of at most 5 bytes that fits 32 bits (primitives.decode_uvarint). */
static int read_uvarint(const uint8_t *f, size_t len, size_t *pos, uint32_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        uint8_t b;
        if (*pos >= len)
            return 0;
        b = f[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > 0xFFFFFFFFu)
                return 0;
            *out = (uint32_t)v;
            return 1;
        }
    }
    return 0;
}

/* The header of one tagged field of a partition, whose tag and size the voters' shape writes
 * in one byte each, at *pos of `f` (which is `len` long): 1 with its tag and size, *pos past
 * the header and *last_tag set to its tag, when the header is whole, its tag comes after
 * *last_tag (tags ascend) and its body is within the frame; 0 (hand over) otherwise. The
 * answer's and the request's partition tags are read with it. */
static int read_small_tag(const uint8_t *f, size_t len, size_t *pos, int *last_tag,
                          uint8_t *tag, uint8_t *size)
{
    if (len - *pos < 2)
        return 0;
    *tag = f[*pos];
    *size = f[*pos + 1];
    *pos += 2;
    if ((int)*tag <= *last_tag || len - *pos < *size)
        return 0;
    *last_tag = *tag;
    return 1;
}

static const uint8_t METADATA_TOPIC_ID[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

#define LOG_OVERHEAD 12

/* The batch at `pos` of `f` (which ends at `end`): 1 when it is whole, its header possible
 * (batch._check_header_fields) and its CRC-32C good, with its fields in `b` and its attributes
 * and max timestamp in the optional outputs; 0 otherwise. */
static int whole_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b,
                       uint16_t *attributes_out, int64_t *max_ts_out)
{
    const uint8_t *h = f + pos;
    int64_t base, last_delta;
    int32_t length, count;
    uint16_t attributes;
    if (end - pos < BATCH_HEADER)
        return 0;
    base = (int64_t)be64(h);
    length = (int32_t)be32(h + 8);
    attributes = be16(h + 21);
    last_delta = (int32_t)be32(h + 23);
    count = (int32_t)be32(h + 57);
    if (length < BATCH_HEADER - LOG_OVERHEAD || h[16] != 2 || count < 0 || base < 0)
        return 0;
    if ((attributes & 0x07) == 0
        && (int64_t)count * 7 > (int64_t)length + LOG_OVERHEAD - BATCH_HEADER)
        return 0;
    if (last_delta < 0 || (count > 0 && last_delta < (int64_t)count - 1))
        return 0;
    if ((size_t)length + LOG_OVERHEAD > end - pos)
        return 0;
    if (crc32c(h + 21, (size_t)length + LOG_OVERHEAD - 21) != be32(h + 17))
        return 0;
    b->base_offset = base;
    b->last_offset = base + last_delta;
    b->epoch = (int32_t)be32(h + 12);
    b->pos = pos;
    b->size = (size_t)length + LOG_OVERHEAD;
    if (attributes_out != NULL)
        *attributes_out = attributes;
    if (max_ts_out != NULL)
        *max_ts_out = (int64_t)be64(h + 35);
    return 1;
}

/* One batch of a leader's answer at `pos` of `f` (which ends at `end`): 1 when whole, valid,
 * within the batch limit and not a control batch (those are the core's), 0 otherwise (the
 * general path then refuses the answer, naming what is wrong). */
static int read_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b)
{
    uint16_t attributes;
    return whole_batch(f, pos, end, b, &attributes, NULL) && !(attributes & 0x20)
           && b->size <= LANE_MAX_BATCH_BYTES;
}

/* One batch of an append at the log's end, as the log's scan of an append checks it
 * (scan_appended): 1 when it is whole, its header possible and its CRC-32C good, with its
 * fields in `b` and its max timestamp in *max_ts; 0 otherwise. */
int appended_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b, int64_t *max_ts)
{
    return whole_batch(f, pos, end, b, NULL, max_ts);
}

/* The plain answer in `f`: 1 with its fields and batches (at most `max` of them; *n set), 0 to
 * hand over. */
int read_fetch_answer(const uint8_t *f, size_t len, int32_t correlation_id,
                      fetch_answer *a, frame_batch *batches, size_t max, size_t *n)
{
    size_t pos, rend;
    uint32_t rlen;
    int last_tag = -1;
    uint8_t count;
    *n = 0;
    if (len < 68)
        return 0;
    /* header: correlation id, no tags; ThrottleTimeMs, ErrorCode, SessionId; one topic */
    if ((int32_t)be32(f) != correlation_id || f[4] != 0 || be16(f + 9) != 0 || f[15] != 2
        || memcmp(f + 16, METADATA_TOPIC_ID, 16) != 0)
        return 0;
    /* one partition: index 0, no error; HighWatermark, LastStableOffset, LogStartOffset */
    if (f[32] != 2 || be32(f + 33) != 0 || be16(f + 37) != 0)
        return 0;
    a->high_watermark = (int64_t)be64(f + 39);
    a->log_start = (int64_t)be64(f + 55);
    if (f[63] > 1) /* aborted transactions: null or none */
        return 0;
    pos = 68; /* and the preferred read replica */
    if (!read_uvarint(f, len, &pos, &rlen))
        return 0;
    rend = pos;
    if (rlen > 0) {
        if ((size_t)rlen - 1 > len - pos)
            return 0;
        rend = pos + rlen - 1;
    }
    while (pos < rend) {
        if (*n == max || !read_batch(f, pos, rend, &batches[*n]))
            return 0;
        pos += batches[*n].size;
        (*n)++;
    }
    a->leader_id = a->leader_epoch = -1;
    if (pos >= len)
        return 0;
    count = f[pos++];
    for (int i = 0; i < count; i++) {
        uint8_t tag, size;
        if (!read_small_tag(f, len, &pos, &last_tag, &tag, &size))
            return 0;
        if (tag == 0 && size == 13) { /* DivergingEpoch: Epoch, EndOffset */
            if (f[pos + 12] != 0)
                return 0;
            if ((int32_t)be32(f + pos) >= 0 && (int64_t)be64(f + pos + 4) >= 0)
                return 0;
        } else if (tag == 1 && size == 9) { /* CurrentLeader: LeaderId, LeaderEpoch */
            if (f[pos + 8] != 0)
                return 0;
            a->leader_id = (int32_t)be32(f + pos);
            a->leader_epoch = (int32_t)be32(f + pos + 4);
        } else if (tag == 2 && size == 13) { /* SnapshotId: EndOffset, Epoch */
            if (f[pos + 12] != 0)
                return 0;
            if ((int64_t)be64(f + pos) >= 0 && (int32_t)be32(f + pos + 8) >= 0)
                return 0;
        } else {
            return 0;
        }
        pos += size;
    }
    /* no topic tags, and no top-level tags (NodeEndpoints is the general path's) */
    if (len - pos != 2 || f[pos] != 0 || f[pos + 1] != 0)
        return 0;
    /* batches that follow one another, in epochs that do not go back (as
     * translate.parse_fetched_batches takes them) */
    for (size_t k = 1; k < *n; k++) {
        if (batches[k].base_offset != batches[k - 1].last_offset + 1
            || batches[k].epoch < batches[k - 1].epoch)
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ the follower's next fetch */

/* The follower's lane acknowledges by sending its next Fetch itself. This writes that
 * request frame (header v2 and body, no size prefix), byte for byte what
 * kraft.server.fetch_fast.encode_fetch_request writes for the voters' shape. What stays the
 * same from one fetch to the next (version, client id, cluster id, replica id and directory
 * id) is the template; the rest is each fetch's own. */

/* The frame into out[0..cap): its length, or 0 when it does not fit or the version is not
 * 17 or 18. */
size_t write_fetch_request(uint8_t *out, size_t cap, const fetch_template *t,
                           int32_t correlation_id, int32_t max_wait_ms, int32_t max_bytes,
                           int32_t current_leader_epoch, int64_t fetch_offset,
                           int32_t last_fetched_epoch, int64_t high_watermark)
{
    writer w = {out, out + cap};
    int64_t hw = t->version >= 18 ? high_watermark : FETCH_HW_NOT_PROVIDED;
    uint32_t cid_field = (uint32_t)t->cluster_id_len + 1;
    if (t->version != 17 && t->version != 18)
        return 0;
    put16(&w, 1); /* Fetch */
    put16(&w, t->version);
    put32(&w, correlation_id);
    if (t->has_client_id) {
        put16(&w, (int16_t)t->client_id_len);
        put(&w, t->client_id, t->client_id_len);
    } else {
        put16(&w, -1);
    }
    put8(&w, 0); /* header tagged fields */
    put32(&w, max_wait_ms);
    put32(&w, 0); /* MinBytes */
    put32(&w, max_bytes);
    put8(&w, 0);   /* IsolationLevel */
    put32(&w, 0);  /* SessionId */
    put32(&w, -1); /* SessionEpoch */
    put8(&w, 2);   /* one topic */
    put(&w, METADATA_TOPIC_ID, 16);
    put8(&w, 2); /* one partition */
    put32(&w, 0);
    put32(&w, current_leader_epoch);
    put64(&w, fetch_offset);
    put32(&w, last_fetched_epoch);
    put64(&w, -1); /* LogStartOffset */
    put32(&w, 0);  /* PartitionMaxBytes */
    put8(&w, (uint8_t)(t->has_dir + (hw != FETCH_HW_NOT_PROVIDED)));
    if (t->has_dir) {
        put8(&w, 0);
        put8(&w, 16);
        put(&w, t->dir, 16);
    }
    if (hw != FETCH_HW_NOT_PROVIDED) {
        put8(&w, 1);
        put8(&w, 8);
        put64(&w, hw);
    }
    put8(&w, 0); /* topic tagged fields */
    put8(&w, 1); /* no forgotten topics */
    put8(&w, 1); /* empty rack id */
    put8(&w, t->replica_id == -1 ? 1 : 2);
    put8(&w, 0); /* ClusterId */
    put_uvarint(&w, (uint32_t)(uvarint_size(cid_field) + t->cluster_id_len));
    put_uvarint(&w, cid_field);
    put(&w, t->cluster_id, t->cluster_id_len);
    if (t->replica_id != -1) {
        put8(&w, 1); /* ReplicaState: ReplicaId, ReplicaEpoch, no tags */
        put8(&w, 13);
        put32(&w, t->replica_id);
        put64(&w, -1);
        put8(&w, 0);
    }
    return w.p == NULL ? 0 : (size_t)(w.p - out);
}

/* ------------------------------------------------------------------ the leader's wire */

/* The leader's lane reads its voters' fetches and writes their answers itself. These
 * are its reading of a Fetch v17/v18 request frame (header v2 and body, no size prefix) and its
 * writing of a plain answer, each the same as kraft.server.fetch_fast's for the voters' shape.
 * The reading is stricter than the Python decoder: the client id must be ASCII (or null), the
 * rack id empty, and a replica state present; anything else is handed over (0). */

int read_fetch_request(const uint8_t *f, size_t len, const char *cluster_id,
                       size_t cluster_id_len, fetch_request *r)
{
    size_t pos;
    int16_t n;
    uint32_t rack, u;
    int last_tag = -1, count, seen_replica = 0;
    static const uint8_t zero[16];
    if (len < 10 || be16(f) != 1)
        return 0;
    r->version = (int16_t)be16(f + 2);
    if (r->version != 17 && r->version != 18)
        return 0;
    r->correlation_id = (int32_t)be32(f + 4);
    n = (int16_t)be16(f + 8);
    if (n < -1)
        return 0;
    pos = 10 + (n > 0 ? (size_t)n : 0);
    if (pos >= len)
        return 0;
    for (size_t i = 10; i < pos; i++)
        if (f[i] >= 0x80)
            return 0; /* a client id the lane takes as ASCII only */
    if (f[pos] != 0 || len - pos < 1 + 21 + 18 + 32 + 1)
        return 0;
    r->max_wait_ms = (int32_t)be32(f + pos + 1);
    r->max_bytes = (int32_t)be32(f + pos + 9);
    pos += 22;
    if (f[pos] != 2 || memcmp(f + pos + 1, METADATA_TOPIC_ID, 16) != 0 || f[pos + 17] != 2)
        return 0;
    if (be32(f + pos + 18) != 0)
        return 0; /* partition 0 */
    r->current_leader_epoch = (int32_t)be32(f + pos + 22);
    r->fetch_offset = (int64_t)be64(f + pos + 26);
    r->last_fetched_epoch = (int32_t)be32(f + pos + 34);
    pos += 50;
    r->has_dir = 0;
    r->high_watermark = FETCH_HW_NOT_PROVIDED;
    count = f[pos++];
    if (count > 2)
        return 0;
    for (int i = 0; i < count; i++) {
        uint8_t tag, size;
        if (!read_small_tag(f, len, &pos, &last_tag, &tag, &size))
            return 0;
        if (tag == 0 && size == 16) {
            memcpy(r->dir, f + pos, 16);
            r->has_dir = memcmp(r->dir, zero, 16) != 0;
        } else if (tag == 1 && size == 8 && r->version >= 18) {
            r->high_watermark = (int64_t)be64(f + pos);
        } else {
            return 0;
        }
        pos += size;
    }
    /* topic tags, no forgotten topics, an empty rack id */
    if (len - pos < 4 || f[pos] != 0 || f[pos + 1] != 1)
        return 0;
    pos += 2;
    if (!read_uvarint(f, len, &pos, &rack) || rack != 1)
        return 0;
    if (pos >= len)
        return 0;
    count = f[pos++];
    last_tag = -1;
    for (int i = 0; i < count; i++) {
        uint8_t tag;
        uint32_t size;
        size_t inner;
        if (pos >= len)
            return 0;
        tag = f[pos++];
        if (!read_uvarint(f, len, &pos, &size) || (int)tag <= last_tag || size > len - pos)
            return 0;
        last_tag = tag;
        if (tag == 0) { /* ClusterId: a compact string filling the field */
            inner = pos;
            if (!read_uvarint(f, len, &inner, &u) || u == 0 || inner + u - 1 != pos + size)
                return 0;
            if (u - 1 != cluster_id_len || memcmp(f + inner, cluster_id, cluster_id_len) != 0)
                return 0;
        } else if (tag == 1 && size == 13) { /* ReplicaState: ReplicaId, ReplicaEpoch, no tags */
            if (f[pos + 12] != 0)
                return 0;
            r->replica_id = (int32_t)be32(f + pos);
            seen_replica = 1;
        } else {
            return 0;
        }
        pos += size;
    }
    if (pos != len || !seen_replica)
        return 0;
    if (r->version < 18)
        r->high_watermark = FETCH_HW_NOT_PROVIDED;
    return 1;
}

/* A plain answer into out[0..cap) (header v1 and body, no size prefix): error 0, the leader's id
 * and epoch, the high watermark, the log start, and `records` (NULL and 0 for none). Its
 * length, or 0 when it does not fit. */
size_t write_fetch_answer(uint8_t *out, size_t cap, int32_t correlation_id,
                          int32_t leader_id, int32_t leader_epoch, int64_t high_watermark,
                          int64_t log_start, const uint8_t *records, size_t records_len)
{
    writer w = {out, out + cap};
    int leader = leader_id != -1 || leader_epoch != -1;
    if (records_len > 0xFFFFFFFEu)
        return 0;
    put32(&w, correlation_id);
    put8(&w, 0);  /* header tags */
    put32(&w, 0); /* ThrottleTimeMs */
    put16(&w, 0); /* ErrorCode */
    put32(&w, 0); /* SessionId */
    put8(&w, 2);  /* one topic */
    put(&w, METADATA_TOPIC_ID, 16);
    put8(&w, 2); /* one partition */
    put32(&w, 0);
    put16(&w, 0);
    put64(&w, high_watermark);
    put64(&w, -1); /* LastStableOffset */
    put64(&w, log_start);
    put8(&w, 1);   /* no aborted transactions */
    put32(&w, -1); /* no preferred read replica */
    put_uvarint(&w, (uint32_t)records_len + 1);
    if (records_len)
        put(&w, records, records_len);
    put8(&w, (uint8_t)leader);
    if (leader) {
        put8(&w, 1); /* CurrentLeader */
        put8(&w, 9);
        put32(&w, leader_id);
        put32(&w, leader_epoch);
        put8(&w, 0);
    }
    put8(&w, 0); /* topic tags */
    put8(&w, 0); /* no top-level tags */
    return w.p == NULL ? 0 : (size_t)(w.p - out);
}

/* ------------------------------------------------------------------ a batch of client PUTs */

/* The leader's lane builds one record batch of the values its loop turn collected: what
 * kraft.records.batch.build_batch builds for plain values (magic 2, no compression, CreateTime,
 * producer id, epoch and sequence -1; each record with attributes 0, timestamp delta 0, its
 * offset delta, a null key, the value and no headers), byte for byte. */

static size_t zigzag_size(int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static void put_zigzag(writer *w, int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u >= 0x80) {
        put8(w, (uint8_t)((u & 0x7f) | 0x80));
        u >>= 7;
    }
    put8(w, (uint8_t)u);
}

/* The size of one record's body (after its length) for a value of `n` bytes at offset delta i. */
static size_t record_body(size_t i, size_t n)
{
    return 4 + zigzag_size((int64_t)i) + zigzag_size((int64_t)n) + n;
}

/* The batch's size, or 0 when it cannot be built (no value, or past Kafka's int32 limits). */
size_t value_batch_size(const size_t *lens, size_t count)
{
    size_t total = BATCH_HEADER;
    if (count == 0 || count > INT32_MAX)
        return 0;
    for (size_t i = 0; i < count; i++) {
        size_t body;
        if (lens[i] > INT32_MAX / 2)
            return 0;
        body = record_body(i, lens[i]);
        total += zigzag_size((int64_t)body) + body;
        if (total - LOG_OVERHEAD > INT32_MAX)
            return 0;
    }
    return total;
}

void write_value_batch(uint8_t *out, size_t size, int64_t base, int32_t epoch, int64_t ts,
                       const uint8_t *const *values, const size_t *lens, size_t count)
{
    writer w = {out, out + size};
    put64(&w, base);
    put32(&w, (int32_t)(size - LOG_OVERHEAD));
    put32(&w, epoch);
    put8(&w, 2);  /* magic */
    put32(&w, 0); /* the CRC, below */
    put16(&w, 0); /* attributes */
    put32(&w, (int32_t)(count - 1));
    put64(&w, ts);
    put64(&w, ts);
    put64(&w, -1); /* producer id */
    put16(&w, -1); /* producer epoch */
    put32(&w, -1); /* base sequence */
    put32(&w, (int32_t)count);
    for (size_t i = 0; i < count; i++) {
        put_zigzag(&w, (int64_t)record_body(i, lens[i]));
        put8(&w, 0); /* attributes */
        put8(&w, 0); /* timestamp delta */
        put_zigzag(&w, (int64_t)i);
        put8(&w, 1); /* a null key */
        put_zigzag(&w, (int64_t)lens[i]);
        put(&w, values[i], lens[i]);
        put8(&w, 0); /* no headers */
    }
    {
        uint32_t crc = crc32c(out + 21, size - 21);
        out[17] = (uint8_t)(crc >> 24);
        out[18] = (uint8_t)(crc >> 16);
        out[19] = (uint8_t)(crc >> 8);
        out[20] = (uint8_t)crc;
    }
}
