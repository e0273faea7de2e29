/* test_status.c: status names, thread-local messages, context chaining, log level parsing. */
#include <pthread.h>

#include "log.h"
#include "testutil.h"

static void *other_thread(void *arg) {
    (void)arg;
    ls_error(LS_ERR_IO, "thread message");
    return NULL;
}

int main(void) {
    LS_EXPECT(strcmp(ls_status_name(LS_OK), "ok") == 0);
    LS_EXPECT(strcmp(ls_status_name(LS_ERR_OUT_OF_MEMORY), "out of memory") == 0);
    LS_EXPECT(ls_error(LS_ERR_FORMAT, "file '%s' is bad", "x.idx") == LS_ERR_FORMAT);
    LS_EXPECT(strcmp(ls_last_error(), "file 'x.idx' is bad") == 0);
    LS_EXPECT(ls_error_context(LS_ERR_FORMAT, "loading %d", 3) == LS_ERR_FORMAT);
    LS_EXPECT(strcmp(ls_last_error(), "loading 3: file 'x.idx' is bad") == 0);
    /* messages are per thread */
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    LS_EXPECT(strcmp(ls_last_error(), "loading 3: file 'x.idx' is bad") == 0);
    ls_error_clear();
    LS_EXPECT(ls_last_error()[0] == '\0');

    ls_log_level lv;
    LS_REQUIRE_OK(ls_log_level_parse("DEBUG", &lv));
    LS_EXPECT(lv == LS_LOG_DEBUG);
    LS_EXPECT_ERR(ls_log_level_parse("loud", &lv), LS_ERR_INVALID_ARGUMENT,
                  "'loud' is not one of error, warn, info, debug");
    setenv("LOCKSTEP_LOG", "info", 1);
    LS_EXPECT(ls_log_get_level() == LS_LOG_INFO);
    LS_EXPECT(ls_log_enabled(LS_LOG_WARN) && !ls_log_enabled(LS_LOG_DEBUG));
    ls_log_set_level(LS_LOG_ERROR);
    LS_EXPECT(!ls_log_enabled(LS_LOG_WARN));
    LS_TEST_END();
}
