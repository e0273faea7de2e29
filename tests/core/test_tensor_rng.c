/* test_tensor_rng.c: tensor creation, description, copies and errors; Philox known answers
 * (Random123's KAT), determinism, the ranges of the draws and shuffles. */
#include "rng.h"
#include "tensor.h"
#include "testutil.h"

int main(void) {
    ls_allocator *a;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &a));
    ls_tensor *t, *u;
    LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 2, (int64_t[]){3, 4}, "t", &t));
    char buf[64];
    LS_EXPECT(strcmp(ls_tensor_describe(t, buf, sizeof buf), "[3, 4] f32 cpu") == 0);
    LS_EXPECT(ls_tensor_numel(t) == 12 && ls_tensor_nbytes(t) == 48);
    for (int i = 0; i < 12; i++) ((float *)t->data)[i] = (float)i;
    LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, (int64_t[]){12}, "u", &u));
    LS_REQUIRE_OK(ls_tensor_copy(NULL, u, t));
    LS_EXPECT(((float *)u->data)[11] == 11.0f);
    LS_REQUIRE_OK(ls_tensor_zero(u));
    LS_EXPECT(((float *)u->data)[11] == 0.0f);
    ls_tensor *w;
    LS_REQUIRE_OK(ls_tensor_create(a, LS_F64, 1, (int64_t[]){12}, "w", &w));
    LS_EXPECT_ERR(ls_tensor_copy(NULL, w, t), LS_ERR_INVALID_ARGUMENT, "cannot copy [3, 4] f32 cpu into [12] f64 cpu");
    ls_tensor *bad = (ls_tensor *)1;
    LS_EXPECT_ERR(ls_tensor_create(a, LS_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, "x", &bad), LS_ERR_INVALID_ARGUMENT,
                  "rank 5");
    LS_EXPECT(bad == NULL);
    LS_EXPECT_ERR(ls_tensor_create(a, LS_F32, 1, (int64_t[]){-2}, "x", &bad), LS_ERR_INVALID_ARGUMENT, "negative");
    /* a view of a rank past LS_MAX_DIMS: invalid (describe read past shape[3]), no shape a copy takes */
    float five[2];
    ls_tensor v5 = ls_tensor_view(five, LS_F32, ls_device_cpu(), 5, (int64_t[]){1, 1, 1, 1, 2});
    LS_EXPECT(v5.ndim == -1 && v5.data == NULL && ls_tensor_numel(&v5) == 0 && !ls_tensor_same_shape(&v5, &v5));
    LS_EXPECT(strcmp(ls_tensor_describe(&v5, buf, sizeof buf), "(an invalid view: made with a rank outside 0..4)") ==
              0);
    LS_EXPECT_ERR(ls_tensor_copy(NULL, &v5, &v5), LS_ERR_INVALID_ARGUMENT, "(an invalid view: made with a rank");
    ls_tensor vneg = ls_tensor_view(five, LS_F32, ls_device_cpu(), -1, NULL);
    LS_EXPECT(vneg.ndim == -1 && ls_tensor_numel(&vneg) == 0);
    ls_dtype dt;
    LS_REQUIRE_OK(ls_dtype_parse("bf16", &dt));
    LS_EXPECT(dt == LS_BF16 && ls_dtype_size(dt) == 2);
    LS_EXPECT_ERR(ls_dtype_parse("int4", &dt), LS_ERR_INVALID_ARGUMENT, "dtype 'int4'");
    ls_tensor_destroy(t);
    ls_tensor_destroy(w);
    ls_memory_stats st;
    ls_allocator_stats(a, &st);
    LS_EXPECT(st.live_bytes == 48); /* u */
    ls_tensor_destroy(u);
    ls_allocator_destroy(a);

    /* Random123 known-answer test: philox4x32_10(ctr 0, key 0) and (ctr all ones, key all ones). */
    uint32_t out[4];
    ls_philox4x32(0, 0, out);
    LS_EXPECT(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
    ls_rng r1, r2;
    ls_rng_init(&r1, 7);
    ls_rng_init(&r2, 7);
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float x = ls_rng_uniform(&r1);
        LS_REQUIRE(x == ls_rng_uniform(&r2));
        LS_REQUIRE(x >= 0.0f && x < 1.0f);
        float z = ls_rng_normal(&r1);
        (void)ls_rng_normal(&r2);
        sum += z;
        sq += (double)z * z;
    }
    LS_EXPECT_NEAR(sum / 100000, 0.0, 0.02);
    LS_EXPECT_NEAR(sq / 100000, 1.0, 0.02);
    int64_t idx[100], seen[100] = {0};
    for (int i = 0; i < 100; i++) idx[i] = i;
    ls_rng_shuffle(&r1, idx, 100);
    int moved = 0;
    for (int i = 0; i < 100; i++) {
        seen[idx[i]]++;
        moved += idx[i] != i;
    }
    for (int i = 0; i < 100; i++) LS_EXPECT(seen[i] == 1);
    LS_EXPECT(moved > 80);
    ls_rng_init_stream(&r1, 7, 1);
    ls_rng_init_stream(&r2, 7, 2);
    LS_EXPECT(ls_rng_u32(&r1) != ls_rng_u32(&r2));
    LS_TEST_END();
}
