/* The settings table: each kind of bad value refused with TMX_ERR_INVALID,
 * range edges taken, overrides over the environment, unknown names
 * refused, and tmx_context_create failing on a bad setting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "unit.h"

#include "core/config.h"
#include "core/core.h"
#include "tmx.h"

static tmx_status_t load1(config_t *c, const char *setting)
{
    const char *ov[] = {setting, NULL};

    return config_load(c, ov);
}

static void bad_values_refused(void **state)
{
    static const char *const bad[] = {
        "TMX_UDP_WINDOW=15",            /* below the range */
        "TMX_UDP_WINDOW=1048577",       /* above it */
        "TMX_UDP_WINDOW=4k",            /* not a number */
        "TMX_UDP_WINDOW=",              /* empty */
        "TMX_UDP_WINDOW=-1",
        "TMX_UDP_MTU=99999999999999999999999",  /* overflows */
        "TMX_LOG_LEVEL=loud",           /* not one of the words */
        "TMX_SHM_CMA=on",
        "TMX_UDP_OFFLOAD=2",
        "TMX_REG_CACHE=1048577",
        "TMX_UDP_ADDR=10.0.0.256",      /* not an IPv4 address */
        "TMX_UDP_ADDR=localhost",
        "TMX_UDP_FAULTS=drop=2",        /* a rate above 1 */
        "TMX_UDP_FAULTS=lose=0.1",      /* no such fault */
        "TMX_UDP_FAULTS=drop=x",
        "TMX_SHM_TEST_STOP=claim:0",
        "TMX_SHM_TEST_STOP=stop:3",
        "TMX_PROTO=shm:fast@0",         /* no such protocol */
        "TMX_PROTO=shm:get@4k,coop@1k", /* rules not ascending */
        "TMX_PROTO=nosuch:get@0",       /* no such transport */
        "TMX_PROTO=shm:eager@4k,get@8k", /* eager not from 0: every context would fail */
        "TMX_TRANSPORTS=",              /* no transport: every context would fail */
        "TMX_TRANSPORTS=, ,",
        "TMX_TRANSPORTS=nosuch",        /* no such transport */
        "TMX_TRANSPORTS=self;shm",      /* not a comma list */
        "TMX_TRANSPORTS=self,SHM",
        ("TMX_TRANSPORTS=self,shm,udp,self,shm,udp,self,shm,udp,self,shm,udp,self,shm,udp,self,shm,udp,"
         "self,shm,udp,self,shm,udp,self,shm,udp,self,shm,udp,self,shm,udp"), /* too long */
    };
    config_t c;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("%s\n", bad[i]);
        assert_int_equal(load1(&c, bad[i]), TMX_ERR_INVALID);
    }
}

static void edges_taken(void **state)
{
    config_t c;

    assert_int_equal(load1(&c, "TMX_TRANSPORTS=self, shm,,udp"), TMX_OK);
    assert_string_equal(c.transports, "self, shm,,udp");
    assert_int_equal(load1(&c, "TMX_UDP_WINDOW=16"), TMX_OK);
    assert_int_equal(c.tl.udp.window, 16);
    assert_int_equal(load1(&c, "TMX_UDP_WINDOW=1048576"), TMX_OK);
    assert_int_equal(c.tl.udp.window, 1048576);
    assert_int_equal(load1(&c, "TMX_UNEXPECTED_MAX=0"), TMX_OK);
    assert_int_equal(c.unexpected_max, 0);
    assert_int_equal(load1(&c, "TMX_REG_CACHE=0"), TMX_OK);
    assert_int_equal(c.reg_cache, 0);
    assert_int_equal(load1(&c, "TMX_LOG_LEVEL=DEBUG"), TMX_OK);
    assert_int_equal(c.log_level, 3);
    assert_int_equal(load1(&c, "TMX_SHM_CMA=off"), TMX_OK);
    assert_int_equal(c.tl.shm.cma, 0);
    assert_int_equal(load1(&c, "TMX_UDP_FAULTS=drop=1,corrupt=0.5"), TMX_OK);
    assert_true(c.tl.udp.faults.drop == 1.0 && c.tl.udp.faults.corrupt == 0.5);
    assert_int_equal(load1(&c, "TMX_SHM_TEST_STOP=publish:7"), TMX_OK);
    assert_int_equal(c.tl.shm.stop_at, TL_SHM_STOP_PUBLISH);
    assert_int_equal(c.tl.shm.stop_n, 7);
    assert_int_equal(load1(&c, "TMX_UDP_ADDR=127.0.0.1"), TMX_OK);
    assert_string_equal(c.tl.udp.addr, "127.0.0.1");
}

static void defaults_match_an_empty_environment(void **state)
{
    config_t a, b;

    unsetenv("TMX_UDP_WINDOW");
    config_defaults(&a);
    assert_int_equal(config_load(&b, NULL), TMX_OK);
    assert_int_equal(a.tl.udp.window, b.tl.udp.window);
    assert_int_equal(a.tl.udp.window, 4096);
    assert_int_equal(a.unexpected_max, b.unexpected_max);
    assert_int_equal(a.reg_cache, 0);
    assert_string_equal(a.transports, "self,shm,udp");
    assert_int_equal(a.transports_set, 0);
}

static void override_beats_environment(void **state)
{
    const char *ov[] = {"TMX_UDP_WINDOW=64", "TMX_UDP_WINDOW=128", NULL}; /* the last wins */
    config_t c;

    setenv("TMX_UDP_WINDOW", "32", 1);
    assert_int_equal(config_load(&c, NULL), TMX_OK);
    assert_int_equal(c.tl.udp.window, 32);
    assert_int_equal(config_load(&c, ov), TMX_OK);
    assert_int_equal(c.tl.udp.window, 128);
    setenv("TMX_UDP_WINDOW", "nonsense", 1);
    assert_int_equal(config_load(&c, NULL), TMX_ERR_INVALID);
    assert_int_equal(config_load(&c, ov), TMX_OK); /* the override hides it */
    unsetenv("TMX_UDP_WINDOW");
}

static void unknown_names_refused(void **state)
{
    config_t c;

    assert_int_equal(load1(&c, "TMX_UDP_WINDOWS=64"), TMX_ERR_INVALID);
    assert_int_equal(load1(&c, "TMX_UDP_WINDOW"), TMX_ERR_INVALID);
    assert_int_equal(load1(&c, "=1"), TMX_ERR_INVALID);
    assert_int_equal(load1(&c, "TMX_RANK=0"), TMX_ERR_INVALID); /* the launcher's, not a setting */
}

static void context_create_refuses_bad_settings(void **state)
{
    const char *bad[] = {"TMX_UNEXPECTED_MAX=lots", NULL};
    const char *good[] = {"TMX_UNEXPECTED_MAX=4096", "TMX_TRANSPORTS=self", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_SETTINGS | TMX_CONTEXT_FIELD_BOOT,
                              .boot = TMX_BOOT_NONE,
                              .settings = bad};
    tmx_context_h ctx = NULL;

    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    assert_null(ctx);
    setenv("TMX_UDP_RTO_MS", "0", 1);
    p.settings = good;
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID); /* the environment's too */
    unsetenv("TMX_UDP_RTO_MS");
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_OK);
    assert_int_equal(ctx->cfg.unexpected_max, 4096);
    assert_int_equal(ctx->n_ifaces, 1); /* TMX_TRANSPORTS=self, strict */
    assert_int_equal(tmx_context_destroy(ctx), TMX_OK);
}

/* An address of no interface: udp, named explicitly, cannot open, and
 * says why (it once bound loopback instead, unreachable from elsewhere). */
static void udp_addr_of_no_interface(void **state)
{
    const char *set[] = {"TMX_UDP_ADDR=198.51.100.77", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_SETTINGS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_TRANSPORTS,
                              .boot = TMX_BOOT_NONE,
                              .transports = "udp",
                              .settings = set};
    tmx_context_h ctx = NULL;

    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    assert_null(ctx);
}

/* TMX_PROTO reaches the transports' tables; a protocol a transport does
 * not offer fails the creation (udp has no one-sided reads). */
static void proto_table_setting(void **state)
{
    const char *set[] = {"TMX_PROTO=self:eager@0,get@100", NULL};
    const char *bad[] = {"TMX_PROTO=udp:get@0", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_SETTINGS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_TRANSPORTS,
                              .boot = TMX_BOOT_NONE,
                              .transports = "self",
                              .settings = set};
    const proto_tl_t *t;
    tmx_context_h ctx = NULL;

    assert_int_equal(tmx_context_create(&p, &ctx), TMX_OK);
    t = ctx->ifaces[0]->above;
    assert_int_equal(t->eager_end, 100);
    assert_int_equal(proto_tl_kind(t, 50), PROTO_GET);
    assert_int_equal(tmx_context_destroy(ctx), TMX_OK);
    p.transports = "udp";
    p.settings = bad;
    ctx = NULL;
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    assert_null(ctx);
}

static void launcher_variables(void **state)
{
    setenv("TMX_RANK", "3", 1);
    assert_string_equal(config_launcher("TMX_RANK"), "3");
    unsetenv("TMX_RANK");
    assert_null(config_launcher("TMX_RANK"));
    assert_null(config_launcher("TMX_UDP_WINDOW")); /* not the launcher's: refused */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_values_refused),
        cmocka_unit_test(edges_taken),
        cmocka_unit_test(defaults_match_an_empty_environment),
        cmocka_unit_test(override_beats_environment),
        cmocka_unit_test(unknown_names_refused),
        cmocka_unit_test(context_create_refuses_bad_settings),
        cmocka_unit_test(udp_addr_of_no_interface),
        cmocka_unit_test(launcher_variables),
        cmocka_unit_test(proto_table_setting),
    };

    return UNIT_MAIN(argc, argv, tests);
}
