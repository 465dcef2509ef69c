/* The KV state machine's PUT, in C: the one unit of the native lane's extension that knows the
 * KV store, kept with the state machine it encodes for (built into kraft.lane._native, whose
 * kraft/lane/csrc/lane.h declares it).
 *
 * It encodes kraft.statemachine.kv's PUT record (kv.encode_put) and reads and answers the binary
 * client protocol's PUT frames (kraft.server.client_protocol), so that the leader's loop turns a
 * client's PUTs into records without Python. A change to either format changes this file too:
 * tests/statemachine/test_kv_put_native.py checks the C and Python encodings byte for byte. */
#include "lane.h"

/* ------------------------------------------------------------------ the client's PUTs */

/* The leader's lane reads the binary client protocol's PUT frames itself:
 *   request: u32 length | u32 id | u8 op | u16 key length | key | value
 *   answer:  u32 length | u32 id | u8 status | i64 offset | i32 leader id
 * (kraft.server.client_protocol). read_puts takes the whole PUT frames at the head of a buffer
 * and gives each one's id and the KV record its value becomes in the log
 * (kraft.statemachine.kv.encode_put: format version 1, op PUT, u32 key length, key, u32 value
 * length, value). It stops at the first frame that is not whole, not a PUT, or not one the lane
 * takes (a key that is not ASCII, a key that overruns its frame, a bad length, a key above
 * KV_MAX_KEY_BYTES or a value above KV_MAX_VALUE_BYTES): those are the Python protocol's, which
 * answers or refuses them. It also stops before the PUT whose record would take the records
 * past max_bytes, unless it is the first: a batch of them stays below the batch limit. */

/* The PUTs at the head of buf[0..len): how many (at most max, their records at most max_bytes
 * unless one alone) into puts, and the bytes they take in *used. */
size_t read_puts(const uint8_t *buf, size_t len, client_put *puts, size_t max,
                 size_t max_bytes, size_t *used)
{
    size_t pos = 0, n = 0, total = 0;
    while (n < max && len - pos >= 4 + CLIENT_REQUEST_HEAD) {
        uint32_t length = be32(buf + pos);
        size_t end, kstart, klen;
        if (length < CLIENT_REQUEST_HEAD || length > CLIENT_MAX_FRAME)
            break;
        end = pos + 4 + (size_t)length;
        if (end > len || buf[pos + 8] != CLIENT_OP_PUT)
            break;
        kstart = pos + 4 + CLIENT_REQUEST_HEAD;
        klen = be16(buf + pos + 9);
        if (kstart + klen > end || klen > KV_MAX_KEY_BYTES
            || end - (kstart + klen) > KV_MAX_VALUE_BYTES)
            break;
        if (n > 0 && total + KV_PUT_OVERHEAD + (end - kstart) > max_bytes)
            break; /* the next batch's */
        for (size_t i = 0; i < klen; i++)
            if (buf[kstart + i] >= 0x80)
                goto stop; /* a key the lane takes as ASCII only */
        puts[n].request_id = be32(buf + pos + 4);
        puts[n].key_at = kstart;
        puts[n].key_len = klen;
        puts[n].value_at = kstart + klen;
        puts[n].value_len = end - (kstart + klen);
        total += KV_PUT_OVERHEAD + (end - kstart);
        n++;
        pos = end;
    }
stop:
    *used = pos;
    return n;
}

/* The KV record of PUT key=value (kv.encode_put) into r[0..KV_PUT_OVERHEAD + klen + vlen). */
void write_kv_put(uint8_t *r, const uint8_t *key, size_t klen, const uint8_t *value,
                  size_t vlen)
{
    writer w = {r, r + KV_PUT_OVERHEAD + klen + vlen};
    put8(&w, 1); /* kv.FORMAT_VERSION */
    put8(&w, 1); /* kv.OP_PUT */
    put32(&w, (int32_t)(uint32_t)klen);
    put(&w, key, klen);
    put32(&w, (int32_t)(uint32_t)vlen);
    put(&w, value, vlen);
}

/* A PUT's answer: OK with its offset (client_protocol.encode_response(id, OK, offset)). */

void write_put_answer(uint8_t out[PUT_ANSWER_SIZE], uint32_t request_id, int64_t offset)
{
    writer w = {out, out + PUT_ANSWER_SIZE};
    put32(&w, PUT_ANSWER_SIZE - 4);
    put32(&w, (int32_t)request_id);
    put8(&w, 0); /* OK */
    put64(&w, offset);
    put32(&w, -1); /* leader id: none to name */
}
