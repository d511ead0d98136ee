/* heads.h — the heads of a tensor between sequence layout and head layout over the CP group
 * (DESIGN.md §2): which rank holds which heads (GQA's KV heads replicated when there are fewer
 * than ranks), packed into the blocks of comm's all-to-all and unpacked from them.
 *
 * Sequence layout (T_loc, nh, HS): this rank's tokens, all nh heads of one tensor. Head layout
 * (T_loc * P, nh_out, HS): all tokens, the heads of this rank. Rank j holds heads
 * src_head(j, i) for i in [0, nh_out), where
 *   nh_out = nh / P and src_head = j * nh_out + i          when nh >= P (nh % P == 0), or
 *   nh_out = 1 and src_head = j * nh / P                   when nh < P (P % nh == 0: each head
 *   goes to P / nh ranks: the KV replication of GQA).
 * Elements of type dt (bf16 moves its 16 bits). Collective over the CP group of c, in the same
 * order on all its ranks; the time of packing and unpacking is counted in the direction's kind
 * of comm_stats. */
#ifndef UP_HEADS_H
#define UP_HEADS_H

#include "comm/comm.h"
#include "core/mem.h"

#include <stddef.h>

/* Sequence layout -> head layout. pack: scratch of heads_pack_floats(..) elements of dt.
 * overwrite recv. With P > 1, recv may be send (the exchange in place, when send holds
 * heads_pack_floats elements): send is packed whole before the transfers start. */
void heads_seq_to_head(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                       mem_dtype dt, void *pack);
/* The same exchange in flight (UPipe's pipe, DESIGN.md §3, comm_exchange): packs send into pack
 * (send may change as soon as it returns) and starts the transfers; pack and recv belong to the
 * exchange until comm_exchange_wait. */
void heads_seq_to_head_start(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                             mem_dtype dt, void *pack, int tag, comm_exchange *x);
/* Head layout -> sequence layout, the transpose: send (T_loc * P, nh_out, HS), recv (T_loc, nh,
 * HS). When heads are replicated (nh < P) the replicas' values are summed in rank order (this is
 * the gradient of the replication; bf16 replicas in fp32, rounded once). overwrite recv. With
 * P > 1, recv may be send: the transfers into pack end before the unpacking starts. */
void heads_head_to_seq(comm_ctx *c, const void *send, void *recv, int T_loc, int nh, int HS,
                       mem_dtype dt, void *pack);
/* The same in flight: heads_head_to_seq_start starts the transfers of send's blocks (send must
 * not change until the wait) into pack (P blocks of (T_loc, nh_out, HS)); after
 * comm_exchange_wait, heads_head_to_seq_finish unpacks pack into recv (T_loc, nh, HS), the
 * replicas summed as above. Requires P > 1. */
void heads_head_to_seq_start(comm_ctx *c, const void *send, int T_loc, int nh, int HS, mem_dtype dt,
                             void *pack, int tag, comm_exchange *x);
void heads_head_to_seq_finish(comm_ctx *c, const void *pack, void *recv, int T_loc, int nh, int HS,
                              mem_dtype dt);
/* Elements of the pack scratch both directions need for these shapes. */
size_t heads_pack_floats(const comm_ctx *c, int T_loc, int nh, int HS);

#endif
