/* nn_impl.h (internal): the module object behind nn.h's opaque ls_module, for module kinds
 * defined outside nn.c (runtime/cnn.c). A new kind embeds struct ls_module as the first member
 * of its own struct, sets vt, and may use the kind-specific fields: y, dx and mask are the
 * activation buffers that Checkpoint releases, children are visited by set_training and by
 * Checkpoint's release. ls_module_destroy calls vt->destroy, frees y, dx and the parameter
 * lists, then the object. The helpers below are nn.c's, shared with the other kinds. */
#ifndef LOCKSTEP_NN_IMPL_H
#define LOCKSTEP_NN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

typedef struct ls_module_vt {
    const char *kind;
    ls_status (*forward)(ls_module *m, const ls_tensor *x, const ls_tensor **y);
    ls_status (*backward)(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx);
    void (*destroy)(ls_module *m);
    /* optional: the kind and the settings that shape its math beyond the parameters' shapes, as
     * "Conv2d(stride=2, padding=1, groups=1)", written into buf (NULL: the kind alone). Ranks
     * compare these at ls_trainer_create. */
    void (*describe)(const ls_module *m, char *buf, size_t n);
    /* backward of a module in the frozen prefix: no parameter of it (or of a module inside it)
     * needs a gradient and no input gradient is wanted of it, so it gets no gradient at all and
     * computes none; only the per-step state its backward would keep, with no activation to read
     * either (a checkpointed segment is not recomputed for it): a batch norm lets its next forward
     * fold the statistics, a dropout counts the pass its masks are keyed to. A container passes it
     * on to its children (ls_module_backward_frozen). NULL: the kind keeps no such state. */
    ls_status (*backward_frozen)(ls_module *m);
} ls_module_vt;

/* A parameter's full name ("layer1.0.body.conv1.weight") with its terminator; a longer one is an
 * error where it is made (it was cut short: weight and bias under one name, found at the first
 * checkpoint). PyTorch's state_dict keys of common models are well under it. */
#define LS_NAME_MAX 128

struct ls_module {
    const ls_module_vt *vt;
    ls_ctx *ctx;
    int n_params;
    ls_tensor **params;
    ls_tensor **grads;
    char (*names)[LS_NAME_MAX];
    unsigned char *no_grad; /* [n_params] of a module without children: parameter i needs no gradient
                             * (a container's are unused: its layers hold the flags) */
    ls_grad_hook hook;
    void *hook_user;
    /* kind-specific */
    const ls_tensor *x; /* input of the last forward */
    ls_tensor *y, *dx;  /* owned buffers */
    ls_act act;
    int n_children;
    ls_module **children;     /* Sequential's children; a Checkpoint's one inner module */
    int *child_first;         /* index of each child's first parameter in the flat list */
    int training;             /* dropout active */
    float p;                  /* dropout probability */
    uint64_t seed;            /* dropout stream */
    uint64_t backward_passes; /* dropout's mask is a function of (seed, backward passes done) */
    ls_tensor *mask;          /* dropout multipliers: 0 or 1/(1-p) */
    int keyed;                /* dropout keyed to samples (ls_module_key_dropout): key_n sample ids */
    uint64_t key_step;
    int64_t *key_rows, key_n, key_cap;
    ls_tensor *lowp[2];  /* Linear, Conv2d: f16/bf16 copies of weight and bias for low-precision inputs */
    uint64_t lowp_epoch; /* the ctx's cast_epoch the copies were cast in (0: none) */
    /* ls_cnn_buffer's list of the buffers in and below this module, made at its first call (the
     * tree below a module does not change once made): each call is then O(1), not a walk */
    struct ls_buffer_ref *buf_refs;
    int n_buf_refs;
    /* Checkpoint: keep_acts (ls_checkpoint_sequential's last segment, as PyTorch's
     * checkpoint_sequential runs its last segment plainly): its forward keeps its layers'
     * activations for the backward that follows, which does not recompute them; held: the output
     * of such a forward, still its layers' buffer (NULL: none held, a backward recomputes) */
    int keep_acts;
    const ls_tensor *held;
    /* Checkpoint: the field in its layers that held the output it keeps (y), given back to it for
     * the recompute, so that the layer writes the same values into the same buffer instead of a
     * second one beside it; NULL where the output was copied */
    ls_tensor **y_home;
    /* trainers made with this module as their model and EMAs made of it (ls_trainer_create,
     * ls_ema_create), not yet destroyed: ls_checkpoint_sequential refuses to consume such a
     * container, which they would go on using, and ls_module_destroy to free a module while one is
     * held in it (their destroys, after, would write into it) */
    int trainers, emas;
    /* the container this module is inside (a Sequential, a Checkpoint, a Residual), which owns it
     * and frees it; NULL: none (the caller's). A module with a parent is refused by
     * ls_module_destroy (the container would free it again) and by every container's create (it
     * would be freed by two) */
    ls_module *parent;
};

/* The training modes of m and of every module inside it (m first, then each child's, depth
 * first): ls_module_training_get copies them to flags (NULL: only counts them) and returns how
 * many; ls_module_training_put sets them back from such a copy. ls_trainer_evaluate puts back the
 * modes the program set (a Dropout or a batch norm it keeps in eval mode). */
int ls_module_training_get(const ls_module *m, unsigned char *flags);
int ls_module_training_put(ls_module *m, const unsigned char *flags);

/* Whether any parameter of m (of the modules inside it) needs a gradient: its backward has work to
 * do even where no input gradient is wanted. */
int ls_module_any_requires_grad(const ls_module *m);

/* The backward of m where nothing in m trains and no input gradient is wanted of it (the layers
 * before the first that trains; ls_module_backward with want_dx 0 on such a module comes here
 * too): vt->backward_frozen of m, which passes it on to the modules inside, then the gradient
 * hooks of m's parameters as ls_module_backward fires them. */
ls_status ls_module_backward_frozen(ls_module *m);

/* For a container's create and destroy: ls_module_adopt makes parent the owner of child (which
 * must have none: checked by the creates, with ls_module_check_free); ls_module_destroy_child
 * frees a child of the container being destroyed. */
ls_status ls_module_check_free(const ls_module *child, const char *where, int index);
void ls_module_adopt(ls_module *parent, ls_module *child);
void ls_module_destroy_child(ls_module *child);

/* A zeroed module of size bytes (0: sizeof(struct ls_module); a kind's struct embeds ls_module
 * first) with vt, ctx and n_params empty parameter slots. */
ls_status ls_module_alloc(ls_ctx *ctx, const ls_module_vt *vt, int n_params, size_t size, ls_module **out);
/* (Re)allocate *t unless it already has this shape and dtype; what names it in an OOM error. */
ls_status ls_module_ensure(ls_ctx *ctx, ls_tensor **t, ls_dtype dtype, int ndim, const int64_t *shape,
                           const char *what);
/* The weight (params[0]) and bias (params[1] or NULL) to compute with for input dtype t: the
 * parameters themselves, or (autocast) f16/bf16 copies in lowp[], refreshed from the f32 masters. */
ls_status ls_module_compute_weights(ls_module *m, ls_dtype t, const ls_tensor **w, const ls_tensor **b);
/* on: the parameters of the modules on m's context will not change until this is called with 0
 * (a trainer's step up to its optimizer, an evaluation): a new epoch, in which a module casts its
 * f16/bf16 weight copies at its first forward and uses them as they are at the next. Where the
 * backend has convert_many (a GPU), every copy a module below m already holds is cast now instead,
 * all in a few multi-tensor launches. off: every forward casts again. */
ls_status ls_module_cache_weight_casts(ls_module *m, int on);

#endif
