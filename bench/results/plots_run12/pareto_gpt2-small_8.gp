set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_gpt2-small_8.svg'
set title 'gpt2-small, batch 8: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_gpt2-small_8.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (24360 MiB, 202.4 ms)', 'pareto_gpt2-small_8.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (6105 MiB, 262.4 ms)', 'pareto_gpt2-small_8.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (17902 MiB, 199.0 ms)', 'pareto_gpt2-small_8.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (17902 MiB, 196.6 ms)', 'pareto_gpt2-small_8.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4365 MiB, 239.1 ms)', 'pareto_gpt2-small_8.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4365 MiB, 240.4 ms)', 'pareto_gpt2-small_8.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo mutwo-at-ckpt-peak (CUDA graph) (6093 MiB, 221.1 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_gpt2-small_8.png'
set title 'gpt2-small, batch 8: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_gpt2-small_8.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (24360 MiB, 202.4 ms)', 'pareto_gpt2-small_8.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (6105 MiB, 262.4 ms)', 'pareto_gpt2-small_8.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (17902 MiB, 199.0 ms)', 'pareto_gpt2-small_8.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (17902 MiB, 196.6 ms)', 'pareto_gpt2-small_8.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4365 MiB, 239.1 ms)', 'pareto_gpt2-small_8.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4365 MiB, 240.4 ms)', 'pareto_gpt2-small_8.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo mutwo-at-ckpt-peak (CUDA graph) (6093 MiB, 221.1 ms)'
