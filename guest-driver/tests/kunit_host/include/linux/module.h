/* SPDX-License-Identifier: GPL-2.0 */
#define MODULE_DESCRIPTION(x)
#define MODULE_LICENSE(x)
