/* test_device.c: device strings, automatic selection falling back to the CPU on a machine
 * without a usable GPU, and the error when cuda is demanded where there is none. */
#include "device.h"
#include "testutil.h"

int main(void) {
    ls_device d;
    char buf[32];
    LS_REQUIRE_OK(ls_device_parse("cpu", &d));
    LS_EXPECT(d.type == LS_DEVICE_CPU);
    LS_REQUIRE_OK(ls_device_parse("cuda:3", &d));
    LS_EXPECT(d.type == LS_DEVICE_CUDA && d.index == 3);
    LS_EXPECT(strcmp(ls_device_str(d, buf, sizeof buf), "cuda:3") == 0);
    LS_REQUIRE_OK(ls_device_parse("cuda", &d));
    LS_EXPECT(d.type == LS_DEVICE_CUDA && d.index == -1);
    LS_EXPECT_ERR(ls_device_parse("tpu", &d), LS_ERR_INVALID_ARGUMENT, "device 'tpu' is not one of cpu, cuda, cuda:N");
    LS_EXPECT_ERR(ls_device_parse("cuda:x", &d), LS_ERR_INVALID_ARGUMENT, "cuda:x");
    LS_EXPECT_ERR(ls_device_parse("cuda: 1", &d), LS_ERR_INVALID_ARGUMENT, "device 'cuda: 1' is not one of");
    LS_EXPECT_ERR(ls_device_parse("cuda:+1", &d), LS_ERR_INVALID_ARGUMENT, "device 'cuda:+1' is not one of");
    LS_EXPECT_ERR(ls_device_parse("cuda:-1", &d), LS_ERR_INVALID_ARGUMENT, "device 'cuda:-1' is not one of");
    /* torch.device("gpu") is an error too: one name for the device, as the help lists it */
    LS_EXPECT_ERR(ls_device_parse("gpu", &d), LS_ERR_INVALID_ARGUMENT, "device 'gpu' is not one of cpu, cuda, cuda:N");

    char why[256];
    int n = ls_device_cuda_count(why, sizeof why);
    if (n == 0) {
        LS_EXPECT(why[0] != '\0');
        unsetenv("LOCKSTEP_DEVICE");
        LS_REQUIRE_OK(ls_device_select(NULL, 0, &d));
        LS_EXPECT(d.type == LS_DEVICE_CPU);
        setenv("LOCKSTEP_DEVICE", "cuda", 1);
        LS_EXPECT_ERR(ls_device_select(NULL, 0, &d), LS_ERR_DEVICE,
                      "LOCKSTEP_DEVICE asks for device 'cuda' but no CUDA device is usable");
        LS_EXPECT_ERR(ls_device_select("cuda:1", 0, &d), LS_ERR_DEVICE, "no CUDA device is usable");
        setenv("LOCKSTEP_DEVICE", "cpu", 1);
        LS_REQUIRE_OK(ls_device_select(NULL, 0, &d));
        LS_EXPECT(d.type == LS_DEVICE_CPU);
        setenv("LOCKSTEP_DEVICE", "gpu0", 1);
        LS_EXPECT_ERR(ls_device_select(NULL, 0, &d), LS_ERR_INVALID_ARGUMENT,
                      "LOCKSTEP_DEVICE: device 'gpu0' is not one of auto, cpu, cuda, cuda:N");
        /* auto, which select takes, is in the list (it was not) */
        LS_EXPECT_ERR(ls_device_select("tpu", 0, &d), LS_ERR_INVALID_ARGUMENT,
                      "device 'tpu' is not one of auto, cpu, cuda, cuda:N");
    } else {
        unsetenv("LOCKSTEP_DEVICE");
        LS_REQUIRE_OK(ls_device_select(NULL, 5, &d));
        LS_EXPECT(d.type == LS_DEVICE_CUDA && d.index == 5 % n);
        LS_EXPECT_ERR(ls_device_select("cuda:1000", 0, &d), LS_ERR_DEVICE, "visible");
    }
    LS_TEST_END();
}
