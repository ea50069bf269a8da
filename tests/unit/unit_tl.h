/*
 * The transports' settings as a context hands them down (tl_iface_params_t
 * .settings): the settings table's defaults with the environment applied.
 * For the transports' own unit tests, which see no core.
 */
#ifndef TMX_TEST_UNIT_TL_H
#define TMX_TEST_UNIT_TL_H

#include "tl/tl.h"

/* TMX_OK, or the settings table's error for a bad value (logged). */
tmx_status_t unit_tl_settings(tl_settings_t *out);

#endif
