/* data.h: datasets and sampling. IDX files (optionally gzip, through zlib) such as
 * Fashion-MNIST, kept as their bytes [n, features] and normalized through a 256-entry table when
 * batches are gathered (or f32 [n, features] from arrays), with int32 labels; and a distributed
 * sampler with torch.utils.data.DistributedSampler's semantics, plus a no-padding mode in which
 * the union of all ranks' batch j is exactly the single-rank batch j (for exact equivalence). */
#ifndef LOCKSTEP_DATA_H
#define LOCKSTEP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A labelled data set in host memory, its samples stored one of two ways: as f32 values
 * (images) or as bytes (bytes, 4x smaller) that stand for the f32 values lut[byte]; exactly one
 * of images and bytes is set. ls_dataset_gather returns f32 either way. Owned by the library: free
 * with ls_dataset_destroy. Treat the samples and labels as read-only once built: a trainer on a
 * GPU may keep a device copy of them (LOCKSTEP_DATA_ON_DEVICE, train.h), found again by id. */
typedef struct ls_dataset {
    int64_t n;           /* samples */
    int64_t rows, cols;  /* image dims (28x28 for Fashion-MNIST; 1 x features from arrays) */
    int64_t features;    /* rows*cols */
    int32_t num_classes; /* 10 for Fashion-MNIST */
    float *images;       /* host [n, features], normalized; NULL when the set keeps bytes */
    int32_t *labels;     /* host [n], each in [0, num_classes) */
    uint64_t id;         /* unique among the process's data sets (1, 2, ...); 0 in a struct filled
                            by hand, which is then never copied to the device */
    uint8_t *bytes;      /* host [n, features] (Fashion-MNIST's pixels); NULL when images is set */
    float lut[256];      /* with bytes: the normalized value of each byte (unused with images) */
} ls_dataset;

/* CRC32 (zlib's) of a data set's sizes, samples (its bytes and their 256 values, or its f32
 * images) and labels: ranks that must train on the same data compare it (ls_ddp_check_settings),
 * so a host whose files differ is found at start. 0 for NULL. About 10 ms for Fashion-MNIST's
 * training set. */
uint32_t ls_dataset_crc32(const ls_dataset *d);

/* The contents of an IDX file: dims[0..ndim) big-endian in the file, row-major data. */
typedef struct ls_idx {
    int ndim;        /* 1..4 */
    int64_t dims[4]; /* each >= 1 */
    uint8_t *data;   /* malloc'd [count] */
    int64_t count;   /* product of dims */
} ls_idx;

/* Read an IDX file, plain or gzip (detected by the magic bytes 1f 8b; one gzip member or several,
 * as gzip -c a b writes them, and zero bytes of padding after them, which gzip and Python's gzip
 * skip too; other bytes after the data are an error, as after a plain file). Only the unsigned-byte
 * type 0x08 is supported. Errors (LS_ERR_IO, LS_ERR_FORMAT, LS_ERR_UNSUPPORTED,
 * LS_ERR_OUT_OF_MEMORY) name the file and the problem; on error *out is left empty. */
ls_status ls_idx_read(const char *path, ls_idx *out);
/* Free idx->data and zero the struct (NULL is fine). */
void ls_idx_free(ls_idx *idx);

/* Load Fashion-MNIST: train=1 reads train-images-idx3-ubyte.gz + train-labels-idx1-ubyte.gz,
 * train=0 the t10k-* pair; where a .gz is not there, the same name without .gz (un-gzipped). dir NULL or "" means $LOCKSTEP_FASHION_DIR, else
 * /usr/share/datasets/fashion-mnist. limit > 0 keeps only the first limit samples (all if the
 * set is smaller). The set keeps the pixels as bytes, with lut[x] = (x/255 - 0.2860)/0.3530
 * (in f32); labels are checked to be < 10. With a limit the labels file is still read and checked
 * whole (every label, a gzip file's checksum), and an un-gzipped images file's size against its
 * header; a gzipped images file is read as far as the limit and its checksum, which covers the
 * whole stream, is not checked (a stream corrupt before the limit gives images of garbage; one
 * cut short or corrupt after it is not found). */
ls_status ls_fashion_mnist_load(const char *dir, int train, int64_t limit, ls_dataset **out);
/* Build a data set from memory (copies images [n, features] and labels [n]); rows = 1 and
 * cols = features (set them afterwards for images). Labels are checked to be in
 * [0, num_classes) and the images to be finite (no NaN or inf). Used by tests and synthetic
 * benchmarks. */
ls_status ls_dataset_from_arrays(int64_t n, int64_t features, int32_t num_classes, const float *images,
                                 const int32_t *labels, ls_dataset **out);
/* The same from bytes [n, features] standing for the values lut[byte] (lut: 256 values, copied). */
ls_status ls_dataset_from_bytes(int64_t n, int64_t features, int32_t num_classes, const uint8_t *bytes,
                                const float lut[256], const int32_t *labels, ls_dataset **out);
/* Store a set that keeps bytes as f32 values instead (images = lut[bytes], bytes freed; 4x the
 * memory), e.g. to change them in place; a set already f32 is left as it is. The values are the
 * same, the id a new one. LS_ERR_OUT_OF_MEMORY leaves the set unchanged; a struct filled by hand
 * (id 0: its memory is not the library's) is LS_ERR_INVALID_ARGUMENT. */
ls_status ls_dataset_to_f32(ls_dataset *d);
/* Bytes of host memory the samples take (n * features, times 4 for f32). */
size_t ls_dataset_sample_bytes(const ls_dataset *d);
void ls_dataset_destroy(ls_dataset *d);
/* Call after changing a data set's images or labels in place (e.g. a new augmentation each epoch):
 * gives it a new id, so a trainer that keeps a device copy (train.h) copies it again instead of
 * training on the old contents. */
void ls_dataset_changed(ls_dataset *d);
/* Copy samples idx[0..count) into images_out [count, features] (f32: lut[byte] for a set of
 * bytes) and labels_out [count]; either output may be NULL to skip it. An index outside [0, n) is
 * LS_ERR_INVALID_ARGUMENT. */
ls_status ls_dataset_gather(const ls_dataset *d, const int64_t *idx, int64_t count, float *images_out,
                            int32_t *labels_out);
/* The same for a set of bytes, copying them as they are: bytes_out [count, features] (a set of f32
 * is LS_ERR_INVALID_ARGUMENT). The trainer stages such batches for a GPU and decodes them there. */
ls_status ls_dataset_gather_bytes(const ls_dataset *d, const int64_t *idx, int64_t count, uint8_t *bytes_out,
                                  int32_t *labels_out);
/* ls_dataset_gather on up to threads threads (the calling one included), each copying a
 * contiguous share of the rows; the result is identical. Fewer threads when the batch is small (under 1 MiB a
 * thread). threads <= 0: LOCKSTEP_GATHER_THREADS (1 to 64; another value is an error naming it),
 * else 4 where the process may run on at least 8 CPUs, else 1.
 * The trainer uses it for batches of an f32 set staged for a GPU (train.h, LOCKSTEP_PREFETCH); a set
 * of bytes is staged with ls_dataset_gather_bytes. */
ls_status ls_dataset_gather_parallel(const ls_dataset *d, const int64_t *idx, int64_t count, float *images_out,
                                     int32_t *labels_out, int threads);
/* The thread count ls_dataset_gather_parallel takes for threads <= 0 (LOCKSTEP_GATHER_THREADS or
 * the default); a bad LOCKSTEP_GATHER_THREADS is LS_ERR_INVALID_ARGUMENT. The trainer reads it once,
 * at creation, on every device (a typo is an error even where no batch would be staged). */
ls_status ls_dataset_gather_threads(int *out);

typedef enum ls_sampler_mode {
    LS_SAMPLER_PAD = 0,       /* default, DistributedSampler: pad by repeating the start of the
                                 (shuffled) list to a multiple of world */
    LS_SAMPLER_DROP_LAST = 1, /* truncate to a multiple of world (DistributedSampler's drop_last),
                                 and ls_sampler_steps drops a short last step (DataLoader's) */
    LS_SAMPLER_EXACT = 2      /* no padding: shards differ by at most 1 sample */
} ls_sampler_mode;

/* Which samples this rank sees in which step. Every rank builds the same permutation of the
 * global list of positions (identity when shuffle = 0); rank r owns positions r, r+world,
 * r+2*world, ... of the padded/truncated/exact total, like DistributedSampler. */
typedef struct ls_sampler ls_sampler;

/* dataset_size >= 0, 0 <= rank < world, mode one of ls_sampler_mode, else
 * LS_ERR_INVALID_ARGUMENT. Starts at epoch 0. */
ls_status ls_sampler_create(int64_t dataset_size, int rank, int world, uint64_t seed, int shuffle, ls_sampler_mode mode,
                            ls_sampler **out);
void ls_sampler_destroy(ls_sampler *s);
/* Reshuffle for epoch e >= 0: the permutation of 0..N-1 from ls_rng_init_stream(&rng, seed, e)
 * and ls_rng_shuffle, identical on every rank. Call before reading each epoch. */
ls_status ls_sampler_set_epoch(ls_sampler *s, int64_t epoch);
/* The current epoch (with the seed, all a checkpoint needs to resume the sampler). */
int64_t ls_sampler_epoch(const ls_sampler *s);
/* This rank's samples in one epoch. */
int64_t ls_sampler_num_samples(const ls_sampler *s);
/* Steps per epoch for a per-rank batch b >= 1: ceil(total/(world*b)), in DROP_LAST mode
 * floor(total/(world*b)) (partial batches are dropped too). Same on all ranks; 0 if b < 1. */
int64_t ls_sampler_steps(const ls_sampler *s, int64_t batch_per_rank);
/* This rank's batch for step j in [0, steps): writes up to batch_per_rank data-set indices into
 * idx_out, their number into *count_out (0 is possible in EXACT mode at the tail), and the
 * number of samples in step j summed over all ranks into *global_count_out (computed locally;
 * may be NULL). With world*b = B, the union over ranks of step j's batches equals the
 * single-rank batch-B step j as a multiset: always in EXACT mode, in PAD mode when world
 * divides N. */
ls_status ls_sampler_batch(const ls_sampler *s, int64_t step, int64_t batch_per_rank, int64_t *idx_out,
                           int64_t *count_out, int64_t *global_count_out);

#ifdef __cplusplus
}
#endif
#endif
