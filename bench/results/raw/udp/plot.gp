set terminal pngcairo noenhanced size 1600,720 font 'DejaVu Sans,10'
set output 'bench/results/raw/.udp.new.27068/udp.png'
set multiplot layout 1,2 title 'UDP between two network namespaces (veth + bridge, MTU 1500) on vm: tmx vs libfabric vs UCX, cores 0 and 1, median of 3 round(s), 2026-11-22'
set logscale xy; set grid xtics ytics lc rgb '#dddddd'
set xtics ('1' 1, '16' 16, '256' 256, '4K' 4096, '64K' 65536, '1M' 1048576, '4M' 4194304)
set xlabel 'message size (bytes)'; set xrange [0.7:4194304*1.5]
set style line 1 lc rgb '#d62728' lw 2.5 pt 7 ps 0.6
set style line 2 lc rgb '#ff7f0e' lw 2 pt 5 ps 0.6
set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.7
set style line 4 lc rgb '#1f77b4' lw 2 pt 11 ps 0.7
set title 'latency, one way (lower is better)'; set ylabel 'microseconds'; set key top left box opaque
plot 'raw/p_tmx_swlat.dat' u 1:2 w lp ls 1 t 'tmx udp (tmx-perf -t lat)', 'raw/p_rxd_swlat.dat' u 1:2 w lp ls 2 t 'libfabric udp;ofi_rxd (fi_pingpong)', 'raw/p_rxm_swlat.dat' u 1:2 w lp ls 3 t 'libfabric tcp;ofi_rxm (fi_pingpong)', 'raw/p_ucx_swlat.dat' u 1:2 w lp ls 4 t 'UCX tcp (ucx_perftest tag_lat, mean)', 4.762 w l dt 3 lc rgb 'black' lw 1.5 t 'raw UDP ping-pong 8 B, spinning (limit)', 12.55 w l dt 2 lc rgb 'gray40' lw 1.5 t 'raw UDP ping-pong 8 B, blocking'
set title 'bandwidth (higher is better): solid = streaming, dashed = ping-pong (size / one-way time)'
set ylabel 'MB/s (10^6 B/s)'; set key bottom right box opaque
plot 'raw/p_tmx_swbw.dat' u 1:2 w lp ls 1 t 'tmx streaming (-t bw, window 64)', 'raw/p_ucx_swbw.dat' u 1:2 w lp ls 4 t 'UCX tcp streaming (tag_bw -O 64)', 'raw/p_tmx_swpbw.dat' u 1:2 w lp ls 1 dt 2 t 'tmx ping-pong', 'raw/p_rxd_swpbw.dat' u 1:2 w lp ls 2 dt 2 t 'rxd ping-pong', 'raw/p_rxm_swpbw.dat' u 1:2 w lp ls 3 dt 2 t 'tcp;rxm ping-pong', 'raw/p_ucx_swpbw.dat' u 1:2 w lp ls 4 dt 2 t 'UCX tcp ping-pong', 'raw/p_udpstream.dat' u 1:2 w p pt 6 ps 2.2 lw 2 lc rgb 'black' t 'raw UDP stream, goodput at the datagram size (limit)', 1501.67 w l dt 3 lc rgb 'black' lw 1.5 t 'raw UDP stream, 1472 B datagrams sent by GSO', 4889.74 w l dt 2 lc rgb 'gray40' lw 1.5 t 'the same with GRO at the receiver'
unset multiplot
