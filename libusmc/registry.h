/* SPDX-License-Identifier: MIT */
/*
 * The context's registry of open connections and listeners (usmc-stat):
 * an intrusive doubly linked list, one node embedded in each object. The
 * caller holds the lock that guards the list (usmc_ctx.reg_lock).
 */
#ifndef USMC_REGISTRY_H
#define USMC_REGISTRY_H

#include <stddef.h>

struct reg_node {
	struct reg_node *prev, *next;
	void *obj; /* the connection or listener this node is embedded in */
};

static inline void reg_link(struct reg_node **head, struct reg_node *n, void *obj)
{
	n->obj = obj;
	n->prev = NULL;
	n->next = *head;
	if (*head)
		(*head)->prev = n;
	*head = n;
}

static inline void reg_unlink(struct reg_node **head, struct reg_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else if (*head == n)
		*head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

#endif
