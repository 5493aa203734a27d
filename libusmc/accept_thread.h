/* SPDX-License-Identifier: MIT */
/*
 * The accept thread of a listener (accept_thread.c; docs/listener.md): it
 * takes connections from the kernel through its accept backend
 * (accept_backend.h), probes them (probe.h) and hands them to the handshake
 * pool or the accept queue (listen_core.h).
 */
#ifndef USMC_ACCEPT_THREAD_H
#define USMC_ACCEPT_THREAD_H

struct usmc_listener;

/* The thread's body (pthread_create(), @arg is the listener). */
void *accept_thread_main(void *arg);

/* Its wake eventfd and epoll set (with the listen socket, not polled yet). */
int accept_thread_fds(struct usmc_listener *l);

#endif
