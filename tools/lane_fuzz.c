/* Memory-safety check of the lane's readings of frames (kraft/lane/csrc/): the follower's of
 * the leader's answers (read_fetch_answer), the leader's of its voters' fetches
 * (read_fetch_request) and of its clients' PUTs (read_puts), built with AddressSanitizer and
 * UBSan by tests/node/test_lane_fetch_answer.py.
 *
 *     lane_fuzz SEED_FRAME ITERATIONS RNG_SEED [answer|request|puts]
 *
 * Each iteration damages a copy of the frame in SEED_FRAME (1-4 bit flips, cuts, overwritten
 * bytes or appended random bytes), copies it into a buffer of exactly its length, and reads
 * it. A read past the buffer or undefined behaviour stops the run with the sanitizer's report;
 * otherwise it prints how many damaged frames were still taken as plain answers.
 */
/* the whole extension as one unit: its sources are built together here */
#include "../kraft/lane/csrc/rules.c"
#include "../kraft/lane/csrc/codec.c"
#include "../kraft/statemachine/csrc/kv_put.c"
#include "../kraft/lane/csrc/shell.c"
#include "../kraft/lane/csrc/follower.c"
#include "../kraft/lane/csrc/leader.c"
#include "../kraft/lane/csrc/args.c"
#include "../kraft/lane/csrc/module.c"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    uint8_t seed[65536];
    size_t n;
    long iterations, taken = 0;
    FILE *fp;
    int requests = argc == 5 && strcmp(argv[4], "request") == 0;
    int client = argc == 5 && strcmp(argv[4], "puts") == 0;
    if (argc != 4 && !(argc == 5 && (requests || client || strcmp(argv[4], "answer") == 0))) {
        fprintf(stderr, "usage: lane_fuzz SEED_FRAME ITERATIONS RNG_SEED [answer|request|puts]\n");
        return 2;
    }
    fp = fopen(argv[1], "rb");
    if (fp == NULL) {
        perror(argv[1]);
        return 2;
    }
    n = fread(seed, 1, sizeof seed, fp);
    fclose(fp);
    iterations = atol(argv[2]);
    srand((unsigned)atol(argv[3]));
    crc_init();
    for (long it = 0; it < iterations; it++) {
        uint8_t *work = malloc(n + 64), *exact;
        size_t len = n, max, found = 0;
        fetch_answer a;
        frame_batch *batches;
        memcpy(work, seed, n);
        for (int k = 1 + rand() % 4; k > 0; k--) {
            size_t at = len ? (size_t)rand() % len : 0;
            switch (rand() % 4) {
            case 0:
                if (len)
                    work[at] ^= (uint8_t)(1u << (rand() % 8));
                break;
            case 1:
                len = at;
                break;
            case 2:
                if (len)
                    work[at] = (uint8_t)rand();
                break;
            default:
                for (int q = 0; q < 8 && len < n + 64; q++)
                    work[len++] = (uint8_t)rand();
            }
        }
        exact = malloc(len ? len : 1);
        memcpy(exact, work, len);
        free(work);
        if (requests) {
            fetch_request r;
            taken += read_fetch_request(exact, len, "abcdefghijklmnopqrstuv", 22, &r);
        } else if (client) {
            size_t used;
            client_put *p = malloc((len / 11 + 1) * sizeof *p);
            taken += read_puts(exact, len, p, len / 11 + 1, (size_t)-1, &used) > 0;
            free(p);
        } else {
            max = len / BATCH_HEADER + 1;
            batches = malloc(max * sizeof *batches);
            taken += read_fetch_answer(exact, len, 5, &a, batches, max, &found);
            free(batches);
        }
        free(exact);
    }
    printf("iterations=%ld taken=%ld\n", iterations, taken);
    return 0;
}
