/* Per-thread counter shards (src/core/shard.h) on one thread: the owned
 * slot's fast path, the second candidate, the shared fallback when every
 * slot is owned, and set-up errors. The threads' cases are in
 * test_shard_mt.c. */
#include <string.h>

#include "core/shard.h"
#include "test_util.h"

/* An id no live thread has: thread pointers are aligned, never odd. */
#define FOREIGN_ID ((uintptr_t)0x1001)

static uint64_t slot_count(const resil__shards *sh, unsigned s, unsigned i) {
  return atomic_load(&sh->slot[s].c[i]);
}

static uint64_t shared_count(const resil__shards *sh, unsigned i) {
  return slot_count(sh, sh->nslots, i);
}

static void shards_one_thread_counts_in_its_own_slot(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, 4, 16));
  assert_int_equal((uintptr_t)sh.slot % 64, 0);
  for (int i = 0; i < 100000; i++) resil__shards_add(&sh, 0, 1);
  for (int i = 0; i < 7; i++) resil__shards_add(&sh, 3, 5);
  assert_int_equal(resil__shards_sum(&sh, 0), 100000);
  assert_int_equal(resil__shards_sum(&sh, 1), 0);
  assert_int_equal(resil__shards_sum(&sh, 2), 0);
  assert_int_equal(resil__shards_sum(&sh, 3), 35);
  /* All of it in the thread's first candidate, which it now owns; nothing
   * went through the shared atomic. */
  uintptr_t id = resil__thread_id();
  assert_true(id != 0);
  unsigned s = resil__shards_index(&sh, id, 0);
  assert_int_equal(atomic_load(&sh.slot[s].owner), id);
  assert_int_equal(slot_count(&sh, s, 0), 100000);
  assert_int_equal(shared_count(&sh, 0), 0);
  assert_int_equal(shared_count(&sh, 3), 0);
  resil__shards_free(&sh);
  assert_null(sh.mem);
  resil__shards_free(&sh); /* twice is harmless */
}

static void shards_taken_first_candidate_moves_to_the_second(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, 2, 16));
  uintptr_t id = resil__thread_id();
  unsigned a = resil__shards_index(&sh, id, 0);
  unsigned b = resil__shards_index(&sh, id, 1);
  atomic_store(&sh.slot[a].owner, FOREIGN_ID);
  for (int i = 0; i < 1000; i++) resil__shards_add(&sh, 1, 2);
  assert_int_equal(resil__shards_sum(&sh, 1), 2000);
  assert_int_equal(slot_count(&sh, a, 1), 0);
  if (b != a) {
    assert_int_equal(atomic_load(&sh.slot[b].owner), id);
    assert_int_equal(slot_count(&sh, b, 1), 2000);
    assert_int_equal(shared_count(&sh, 1), 0);
  } else {
    assert_int_equal(shared_count(&sh, 1), 2000);
  }
  resil__shards_free(&sh);
}

static void shards_all_slots_owned_fall_back_to_the_shared_counter(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, 3, 4));
  for (unsigned s = 0; s < sh.nslots; s++)
    atomic_store(&sh.slot[s].owner, FOREIGN_ID + 2 * s);
  /* The other owners' earlier counts stay in the sum. */
  atomic_store(&sh.slot[1].c[2], 40);
  for (int i = 0; i < 5000; i++) resil__shards_add(&sh, 2, 1);
  assert_int_equal(resil__shards_sum(&sh, 2), 5040);
  assert_int_equal(shared_count(&sh, 2), 5000);
  for (unsigned s = 0; s < sh.nslots; s++)
    assert_int_equal(atomic_load(&sh.slot[s].owner), FOREIGN_ID + 2 * s);
  resil__shards_free(&sh);
}

static void shards_slot_of_an_exited_thread_with_this_id_is_continued(
    void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, 1, 8));
  uintptr_t id = resil__thread_id();
  unsigned a = resil__shards_index(&sh, id, 0);
  /* As a thread with the same thread pointer left it. */
  atomic_store(&sh.slot[a].owner, id);
  atomic_store(&sh.slot[a].c[0], 1234);
  resil__shards_add(&sh, 0, 1);
  assert_int_equal(slot_count(&sh, a, 0), 1235);
  assert_int_equal(resil__shards_sum(&sh, 0), 1235);
  assert_int_equal(shared_count(&sh, 0), 0);
  resil__shards_free(&sh);
}

static void shards_init_rejects_bad_sizes_and_reports_no_memory(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_EINVAL, resil__shards_init(&sh, NULL, 0, 16));
  assert_status(RESIL_EINVAL, resil__shards_init(&sh, NULL, 8, 16));
  assert_status(RESIL_EINVAL, resil__shards_init(&sh, NULL, 1, 1));
  assert_status(RESIL_EINVAL, resil__shards_init(&sh, NULL, 1, 12));
  assert_status(RESIL_EINVAL, resil__shards_init(&sh, NULL, 1, 512));
  resil__shards_free(&sh); /* after a failed init: nothing to free */
  test_alloc ta;
  test_alloc_init(&ta, 1);
  assert_status(RESIL_ENOMEM, resil__shards_init(&sh, &ta.a, 1, 16));
  assert_int_equal(ta.live, 0);
  test_alloc_init(&ta, 0);
  assert_status(RESIL_OK, resil__shards_init(&sh, &ta.a, 7, 256));
  assert_int_equal(ta.live, 1);
  for (unsigned i = 0; i < 7; i++) resil__shards_add(&sh, i, i + 1);
  for (unsigned i = 0; i < 7; i++)
    assert_int_equal(resil__shards_sum(&sh, i), i + 1);
  resil__shards_free(&sh);
  assert_int_equal(ta.live, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shards_one_thread_counts_in_its_own_slot),
      cmocka_unit_test(shards_taken_first_candidate_moves_to_the_second),
      cmocka_unit_test(shards_all_slots_owned_fall_back_to_the_shared_counter),
      cmocka_unit_test(
          shards_slot_of_an_exited_thread_with_this_id_is_continued),
      cmocka_unit_test(shards_init_rejects_bad_sizes_and_reports_no_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
